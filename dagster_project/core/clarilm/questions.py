"""ClariLM §3.3.1-3.3.2: the question set Q = (Q^L, Q^G).

Q^L: the first user question of each logged conversation, kept when cheap rules pass (not extremely long,
English, more than a single turn) and an LLM filter judges it context-independent and well-formed; then
exact + semantic dedup. Q^G: persona-driven synthetic questions with in-context demonstrations drawn from
Q^L (and user seed files), 80/10/10 keep / enrich / simplify, deduplicated against itself and Q^L.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from dagster_project.llm.chat import ChatRequest, ChatResult
from dagster_project.core.shared.dedup import Embed, semantic_dedup
from dagster_project.core.clarilm.logs import asks_user
from dagster_project.llm.parsing import parse_json_object, require_fields
from dagster_project.llm.prompts import load_prompt

# --------------------------------------------------------------------------- Q^L

ENGLISH_NAMES = {"english", "en", "eng", "en-us", "en-gb"}
QL_REJECT_REASONS = ("too_long", "not_english", "single_turn", "skipped", "llm_error", "parse_error",
                     "context_dependent", "not_well_formed", "duplicate")


def looks_english(text: str, language: str | None) -> bool:
    """The log's language tag when present; otherwise at most 10% of the letters are non-ASCII."""
    if language:
        return language.strip().lower() in ENGLISH_NAMES
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return False
    return sum(1 for c in letters if not c.isascii()) / len(letters) <= 0.1


def first_questions(raw_logs: pl.DataFrame, ask_max_chars: int = 300) -> pl.DataFrame:
    """One row per conversation: its first user turn, the turn count, and the assistant's reply to it.

    When that reply asks the user something (the prefilter's rule), the log holds no direct answer to the
    question: `log_answer` is null and `log_assistant_asked` is true; otherwise the reply is `log_answer`.
    """
    conv = "conversation_id"
    ordered = raw_logs.sort(conv, "turn_index").with_columns(
        next_role=pl.col("role").shift(-1).over(conv), next_text=pl.col("text").shift(-1).over(conv))
    firsts = ordered.filter(pl.col("role") == "user").group_by(conv, maintain_order=True).first()
    n_turns = raw_logs.filter(pl.col("role") != "system").group_by(conv).agg(n_turns=pl.len())
    replied = pl.col("next_role") == "assistant"
    asked = replied & asks_user(pl.col("next_text").fill_null(""), ask_max_chars)
    return firsts.join(n_turns, on=conv, how="left").select(
        pl.format("ql-{}", pl.col(conv)).alias("question_id"),
        pl.col("text").alias("question"),
        conv,
        pl.when(replied & ~asked).then(pl.col("next_text")).alias("log_answer"),
        asked.alias("log_assistant_asked"),
        "n_turns", "language", "log_date", pl.col("source").alias("log_source"),
    ).sort("question_id")


def ql_rules(first: pl.DataFrame, max_chars: int, english_only: bool, min_turns: int) -> pl.DataFrame:
    """Adds `rule_reason`: too_long / not_english / single_turn, or null when the question may go to the LLM."""
    english = [looks_english(q, lang) for q, lang in zip(first["question"], first["language"])]
    return first.with_columns(english=pl.Series(english, dtype=pl.Boolean)).with_columns(
        rule_reason=pl.when(pl.col("question").str.len_chars() > max_chars).then(pl.lit("too_long"))
        .when(pl.lit(english_only) & ~pl.col("english")).then(pl.lit("not_english"))
        .when(pl.col("n_turns") < min_turns).then(pl.lit("single_turn"))
        .otherwise(pl.lit(None, pl.Utf8))).drop("english")


QL_FILTER_SCHEMA = {
    "type": "object",
    "properties": {
        "context_independent": {"type": "boolean"},
        "well_formed": {"type": "boolean"},
        "reason": {"type": "string", "maxLength": 160},
    },
    "required": ["context_independent", "well_formed", "reason"],
}


def ql_filter_requests(rows: pl.DataFrame) -> list[ChatRequest]:
    prompt = load_prompt("clarilm_ql_filter")
    return [ChatRequest.of(prompt.messages(question=q), prompt.version, QL_FILTER_SCHEMA, temperature=0.0,
                           max_tokens=120) for q in rows["question"]]


def parse_ql_filter(results: list[ChatResult], requests: list[ChatRequest]) -> pl.DataFrame:
    """context_independent, well_formed, filter_reason, status, error, raw_output, model, prompt_version."""
    out = []
    for res, req in zip(results, requests, strict=True):
        row: dict[str, Any] = {"context_independent": None, "well_formed": None, "filter_reason": None,
                               "status": "ok", "error": None, "raw_output": None if res.error else res.text,
                               "model": res.model, "prompt_version": req.prompt_version}
        if res.error:
            row.update(status="llm_error", error=res.error)
        else:
            obj, err = parse_json_object(res.text)
            err = err or require_fields(obj, {"context_independent": bool, "well_formed": bool})
            if err:
                row.update(status="parse_error", error=err)
            else:
                row.update(context_independent=obj["context_independent"], well_formed=obj["well_formed"],
                           filter_reason=str(obj.get("reason", ""))[:160] or None)
        out.append(row)
    return pl.DataFrame(out, schema={"context_independent": pl.Boolean, "well_formed": pl.Boolean,
                                     "filter_reason": pl.Utf8, "status": pl.Utf8, "error": pl.Utf8,
                                     "raw_output": pl.Utf8, "model": pl.Utf8, "prompt_version": pl.Utf8})


def llm_reason(status: pl.Expr = pl.col("status")) -> pl.Expr:
    return (pl.when(status != "ok").then(status)
            .when(~pl.col("context_independent")).then(pl.lit("context_dependent"))
            .when(~pl.col("well_formed")).then(pl.lit("not_well_formed"))
            .otherwise(pl.lit(None, pl.Utf8)))


def apply_dedup(rows: pl.DataFrame, candidates: pl.Expr, text_col: str, embed: Embed, tau: float, block: int,
                id_col: str = "question_id", quality: list[float] | None = None) -> pl.DataFrame:
    """Exact + semantic dedup of the rows where `candidates` holds; sets kept / duplicate_of / similarity /
    reject_reason='duplicate' on the others. Rows outside `candidates` are returned unchanged (kept=False)."""
    pool = rows.filter(candidates)
    rest = rows.filter(~candidates)
    res = semantic_dedup(pool[text_col].to_list(), quality or [1.0] * pool.height, embed, tau, block)
    ids = pool[id_col].to_list()
    pool = pool.with_columns(
        kept=res.table["kept"],
        duplicate_of=pl.Series([ids[d] if d >= 0 else None for d in res.table["duplicate_of"]], dtype=pl.Utf8),
        similarity=res.table["similarity"],
        dedup_reason=res.table["dedup_reason"],
    ).with_columns(reject_reason=pl.when(pl.col("kept")).then(pl.lit(None, pl.Utf8)).otherwise(pl.lit("duplicate")))
    rest = rest.with_columns(kept=pl.lit(False), duplicate_of=pl.lit(None, pl.Utf8),
                             similarity=pl.lit(None, pl.Float64), dedup_reason=pl.lit(None, pl.Utf8))
    return pl.concat([pool, rest], how="diagonal_relaxed").sort(id_col)


# --------------------------------------------------------------------------- personas and seed questions

def load_personas(path: str | Path) -> pl.DataFrame:
    """JSONL {persona_id, description}; a bad line is an error naming file, line and field."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: persona file not found (questions.personas_path)")
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{n}: invalid JSON ({e.msg})") from None
        for field in ("persona_id", "description"):
            if not isinstance(obj.get(field), str) or not obj[field].strip():
                raise ValueError(f"{path}:{n}: field {field!r} must be a non-empty string")
        rows.append({"persona_id": obj["persona_id"], "description": obj["description"].strip()})
    df = pl.DataFrame(rows, schema={"persona_id": pl.Utf8, "description": pl.Utf8})
    dups = df.filter(pl.col("persona_id").is_duplicated())["persona_id"].unique().to_list()
    if dups:
        raise ValueError(f"{path}: duplicate persona_id {sorted(dups)}")
    return df


def load_seed_questions(paths: list[str]) -> list[str]:
    """User-provided seed questions for the demonstrations: .txt (one per line) or .jsonl ({"question": ...})."""
    out = []
    for p in map(Path, paths):
        if not p.exists():
            raise FileNotFoundError(f"{p}: seed question file not found (questions.seed_files)")
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            if p.suffix == ".jsonl":
                try:
                    q = json.loads(line).get("question")
                except (json.JSONDecodeError, AttributeError):
                    raise ValueError(f"{p}:{n}: expected a JSON object with a 'question' field") from None
                if not isinstance(q, str) or not q.strip():
                    raise ValueError(f"{p}:{n}: field 'question' must be a non-empty string")
                out.append(q.strip())
            else:
                out.append(line.strip())
    return out


# --------------------------------------------------------------------------- Q^G

TRANSFORMS = ("keep", "enrich", "simplify")


def split_counts(n: int, shares: tuple[float, float, float]) -> dict[str, int]:
    """Exact counts for keep/enrich/simplify by largest remainder (8 rows at 80/10/10 -> 6/1/1)."""
    raw = [n * s for s in shares]
    counts = [int(np.floor(x)) for x in raw]
    for i in sorted(range(3), key=lambda i: raw[i] - counts[i], reverse=True)[: n - sum(counts)]:
        counts[i] += 1
    return dict(zip(TRANSFORMS, counts))


def qg_plan(personas: pl.DataFrame, n_personas: int, per_persona: int, demo_pool: list[str], n_demos: int,
            shares: tuple[float, float, float], seed: int = 0) -> pl.DataFrame:
    """One row per question to generate: persona, demonstrations sampled from the pool, transformation."""
    rng = random.Random(seed)
    chosen = personas.head(n_personas)
    n = chosen.height * per_persona
    counts = split_counts(n, shares)
    transforms = [t for t in TRANSFORMS for _ in range(counts[t])]
    rng.shuffle(transforms)
    rows = []
    for p in chosen.iter_rows(named=True):
        for k in range(per_persona):
            demos = rng.sample(demo_pool, min(n_demos, len(demo_pool))) if demo_pool else []
            rows.append({"qg_id": f"qg-{p['persona_id']}-{k:02d}", "persona_id": p["persona_id"],
                         "persona": p["description"], "sample": k, "demos": demos,
                         "transformation": transforms[len(rows)]})
    return pl.DataFrame(rows, schema={"qg_id": pl.Utf8, "persona_id": pl.Utf8, "persona": pl.Utf8,
                                      "sample": pl.Int64, "demos": pl.List(pl.Utf8), "transformation": pl.Utf8})


QG_SCHEMA = {
    "type": "object",
    "properties": {"topic": {"type": "string", "maxLength": 60}, "question": {"type": "string", "maxLength": 300}},
    "required": ["topic", "question"],
}
TRANSFORM_SCHEMA = {
    "type": "object",
    "properties": {"question": {"type": "string", "maxLength": 400}},
    "required": ["question"],
}
TRANSFORM_INSTRUCTIONS = {
    "enrich": "Add one or two concrete details about the person's situation (who, where, when, constraints) "
              "so the request becomes more specific. Keep the same goal.",
    "simplify": "Remove details so the request becomes shorter and less specific, as a hurried user would "
                "type it. Keep the same goal.",
}


def _demo_block(demos: list[str]) -> str:
    return "\n".join(f"- {d}" for d in demos) if demos else "- (no examples available)"


def qg_requests(plan: pl.DataFrame, temperature: float, seed: int = 0) -> list[ChatRequest]:
    prompt = load_prompt("clarilm_generate_question")
    return [ChatRequest.of(prompt.messages(persona=r["persona"], examples=_demo_block(r["demos"])), prompt.version,
                           QG_SCHEMA, temperature=temperature, seed=seed + i, max_tokens=160)
            for i, r in enumerate(plan.iter_rows(named=True))]


def transform_requests(rows: pl.DataFrame) -> list[ChatRequest]:
    prompt = load_prompt("clarilm_transform_question")
    return [ChatRequest.of(prompt.messages(question=r["original_question"],
                                           instruction=TRANSFORM_INSTRUCTIONS[r["transformation"]]),
                           prompt.version, TRANSFORM_SCHEMA, temperature=0.7, max_tokens=200)
            for r in rows.iter_rows(named=True)]


def _field(res: ChatResult, fields: dict[str, type]) -> tuple[dict | None, str, str | None]:
    """(object, status, error) for one reply that must hold `fields`."""
    if res.error:
        return None, "llm_error", res.error
    obj, err = parse_json_object(res.text)
    err = err or require_fields(obj, fields)
    return (None, "parse_error", err) if err else (obj, "ok", None)


def parse_qg(plan: pl.DataFrame, requests: list[ChatRequest], results: list[ChatResult]) -> pl.DataFrame:
    rows = []
    for r, req, res in zip(plan.iter_rows(named=True), requests, results, strict=True):
        obj, status, err = _field(res, {"question": str})
        rows.append({**r, "topic": (str(obj.get("topic", "")).strip() or None) if obj else None,
                     "original_question": obj["question"].strip() if obj else None,
                     "status": status, "error": err, "raw_output": None if res.error else res.text,
                     "model": res.model, "prompt_version": req.prompt_version})
    return pl.DataFrame(rows, schema_overrides={"topic": pl.Utf8, "original_question": pl.Utf8, "error": pl.Utf8,
                                                "raw_output": pl.Utf8, "demos": pl.List(pl.Utf8)})


def apply_transforms(rows: pl.DataFrame, todo_ids: list[str], requests: list[ChatRequest],
                     results: list[ChatResult]) -> pl.DataFrame:
    """`question` = the transformed text for enrich/simplify rows (the original when the rewrite failed,
    with transform_status saying why), the original for keep rows."""
    by_id = {}
    for qid, req, res in zip(todo_ids, requests, results, strict=True):
        obj, status, err = _field(res, {"question": str})
        by_id[qid] = (obj["question"].strip() if obj else None, status, err,
                      None if res.error else res.text, req.prompt_version)
    new_q, t_status, t_error, t_raw, t_version = [], [], [], [], []
    for r in rows.iter_rows(named=True):
        got = by_id.get(r["qg_id"])
        if got is None:
            new_q.append(r["original_question"])
            t_status.append(None)
            t_error.append(None)
            t_raw.append(None)
            t_version.append(None)
        else:
            new_q.append(got[0] or r["original_question"])
            t_status.append(got[1])
            t_error.append(got[2])
            t_raw.append(got[3])
            t_version.append(got[4])
    return rows.with_columns(
        question=pl.Series(new_q, dtype=pl.Utf8), transform_status=pl.Series(t_status, dtype=pl.Utf8),
        transform_error=pl.Series(t_error, dtype=pl.Utf8), transform_raw_output=pl.Series(t_raw, dtype=pl.Utf8),
        transform_prompt_version=pl.Series(t_version, dtype=pl.Utf8))


def dedup_against(qg: pl.DataFrame, ql: pl.DataFrame, embed: Embed, tau: float, block: int) -> pl.DataFrame:
    """Dedup Q^G (rows with status ok) against itself and the kept Q^L questions, which always win:
    kept / duplicate_of (a qg_id or a Q^L question_id) / similarity / reject_reason."""
    usable = qg.filter(pl.col("status") == "ok")
    texts = ql["question"].to_list() + usable["question"].to_list()
    ids = ql["question_id"].to_list() + usable["qg_id"].to_list()
    quality = [2.0] * ql.height + [1.0] * usable.height  # a real log question beats a synthetic one
    res = semantic_dedup(texts, quality, embed, tau, block).table.slice(ql.height)
    dup_ids = [ids[d] if d >= 0 else None for d in res["duplicate_of"]]
    usable = usable.with_columns(
        kept=res["kept"], duplicate_of=pl.Series(dup_ids, dtype=pl.Utf8), similarity=res["similarity"],
        dedup_reason=res["dedup_reason"],
        reject_reason=pl.Series([None if d is None else ("duplicate_of_ql" if d.startswith("ql-") else "duplicate")
                                 for d in dup_ids], dtype=pl.Utf8))
    failed = qg.filter(pl.col("status") != "ok").with_columns(
        kept=pl.lit(False), duplicate_of=pl.lit(None, pl.Utf8), similarity=pl.lit(None, pl.Float32),
        dedup_reason=pl.lit(None, pl.Utf8), reject_reason=pl.col("status"))
    return pl.concat([usable, failed], how="diagonal_relaxed").sort("qg_id")


# --------------------------------------------------------------------------- Q = (Q^L, Q^G)
def select_questions(ql: pl.DataFrame, qg: pl.DataFrame, limit: int | None) -> pl.DataFrame:
    """Q = (Q^L, Q^G): kept questions of both sets, interleaved so a cap keeps both sources; `selected` marks
    the first `limit` (all when None)."""
    cols = ["question_id", "question", "question_source", "log_answer"]
    left = ql.filter(pl.col("kept")).sort("question_id").with_columns(question_source=pl.lit("log")).select(cols)
    right = qg.filter(pl.col("kept")).sort("question_id").with_columns(
        question_source=pl.lit("generated"), log_answer=pl.lit(None, pl.Utf8)).select(cols)
    order = []
    for i in range(max(left.height, right.height)):
        order += [left.slice(i, 1), right.slice(i, 1)]
    out = pl.concat([f for f in order if f.height], how="vertical") if order else left.clear()
    return out.with_row_index("rank").with_columns(
        selected=pl.lit(True) if limit is None else pl.col("rank") < limit).drop("rank")
