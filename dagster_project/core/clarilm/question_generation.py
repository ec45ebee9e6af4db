"""ClariLM §3.3.2: Q^G, persona-driven synthetic questions. A persona and in-context demonstrations drawn
from Q^L (and user seed files) give a topic and a question; 80/10/10 of them are kept / enriched /
simplified; the result is deduplicated against itself and Q^L (a logged question always wins).
"""

from __future__ import annotations

import random
from typing import Annotated, Any

import numpy as np
import polars as pl
from pydantic import ConfigDict, WithJsonSchema

from dagster_project.config import QuestionsConfig
from dagster_project.core.shared.dedup import (
    DEFAULT_ANN,
    AnnSearch,
    ann_search,
    Embed,
    semantic_dedup,
)
from dagster_project.io.formats.clarilm_inputs import load_personas, load_seed_questions
from dagster_project.llm.task import Chat, LLMTask, NonEmpty, Reply, Status, text_field

# --------------------------------------------------------------------------- personas and seed questions


# --------------------------------------------------------------------------- plan

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


class GeneratedQuestion(Reply):
    """A persona's question; the topic is optional free text."""

    model_config = ConfigDict(json_schema_extra=lambda schema, _: schema.update(required=["topic", "question"]))

    topic: Annotated[Any, WithJsonSchema({"type": "string", "maxLength": 60})] = ""
    question: NonEmpty = text_field(300)


class Rewrite(Reply):
    """The enriched / simplified question."""

    question: NonEmpty = text_field(400)


GENERATE = LLMTask("clarilm_generate_question", role="generator", reply=GeneratedQuestion,
                   sampling={"max_tokens": 160})
TRANSFORM = LLMTask("clarilm_transform_question", role="generator", reply=Rewrite,
                    sampling={"temperature": 0.7, "max_tokens": 200})

TRANSFORM_INSTRUCTIONS = {
    "enrich": "Add one or two concrete details about the person's situation (who, where, when, constraints) "
              "so the request becomes more specific. Keep the same goal.",
    "simplify": "Remove details so the request becomes shorter and less specific, as a hurried user would "
                "type it. Keep the same goal.",
}


def _demo_block(demos: list[str]) -> str:
    return "\n".join(f"- {d}" for d in demos) if demos else "- (no examples available)"

def generate(chat: Chat, plan: pl.DataFrame, temperature: float, seed: int = 0) -> pl.DataFrame:
    """One question per plan row (seed + row number: no two identical samples) -> topic, original_question
    and provenance."""
    out = GENERATE.run(chat, list(enumerate(plan.iter_rows(named=True))),
                       lambda item: {"persona": item[1]["persona"], "examples": _demo_block(item[1]["demos"])},
                       lambda item: {"temperature": temperature, "seed": seed + item[0]})
    rows = [{**o.item[1], "topic": (str(o.value.topic).strip() or None) if o.ok else None,
             "original_question": o.value.question.strip() if o.ok else None, **o.provenance()} for o in out]
    return pl.DataFrame(rows, schema_overrides={"topic": pl.Utf8, "original_question": pl.Utf8, "error": pl.Utf8,
                                                "raw_output": pl.Utf8, "demos": pl.List(pl.Utf8)})


def transform(chat: Chat, rows: pl.DataFrame) -> pl.DataFrame:
    """Rewrite the usable enrich / simplify rows. `question` = the rewrite (the original when the rewrite failed,
    with transform_status saying why), the original for keep rows (transform_* null)."""
    todo = [r for r in rows.iter_rows(named=True) if r["status"] == Status.OK and r["transformation"] != "keep"]
    done = {o.item["qg_id"]: o for o in TRANSFORM.run(
        chat, todo, lambda r: {"question": r["original_question"],
                               "instruction": TRANSFORM_INSTRUCTIONS[r["transformation"]]})}
    cols: dict[str, list[Any]] = {k: [] for k in ("question", "transform_status", "transform_error",
                                                  "transform_raw_output", "transform_prompt_version")}
    for qid, original in zip(rows["qg_id"], rows["original_question"], strict=True):
        o = done.get(qid)
        prov = o.provenance() if o else {}
        cols["question"].append((o.value.question.strip() if o and o.ok else None) or original)
        for name in ("status", "error", "raw_output", "prompt_version"):
            cols[f"transform_{name}"].append(prov.get(name))
    return rows.with_columns(**{k: pl.Series(v, dtype=pl.Utf8) for k, v in cols.items()})


def dedup_against(qg: pl.DataFrame, ql: pl.DataFrame, embed: Embed, tau: float, block: int,
                  ann: AnnSearch = DEFAULT_ANN) -> tuple[pl.DataFrame, dict[str, int | str]]:
    """Dedup Q^G (rows with status ok) against itself and the kept Q^L questions, which always win:
    kept / duplicate_of (a qg_id or a Q^L question_id) / similarity / reject_reason; plus the search summary."""
    usable = qg.filter(pl.col("status") == Status.OK)
    texts = ql["question"].to_list() + usable["question"].to_list()
    ids = ql["question_id"].to_list() + usable["qg_id"].to_list()
    quality = [2.0] * ql.height + [1.0] * usable.height  # a real log question beats a synthetic one
    dedup = semantic_dedup(texts, quality, embed, tau, block, ann)
    res = dedup.table.slice(ql.height)
    dup_ids = [ids[d] if d >= 0 else None for d in res["duplicate_of"]]
    usable = usable.with_columns(
        kept=res["kept"], duplicate_of=pl.Series(dup_ids, dtype=pl.Utf8), similarity=res["similarity"],
        dedup_reason=res["dedup_reason"],
        reject_reason=pl.Series([None if d is None else ("duplicate_of_ql" if d.startswith("ql-") else "duplicate")
                                 for d in dup_ids], dtype=pl.Utf8))
    failed = qg.filter(pl.col("status") != Status.OK).with_columns(
        kept=pl.lit(False), duplicate_of=pl.lit(None, pl.Utf8), similarity=pl.lit(None, pl.Float32),
        dedup_reason=pl.lit(None, pl.Utf8), reject_reason=pl.col("status"))
    return pl.concat([usable, failed], how="diagonal_relaxed").sort("qg_id"), dedup.search


def seed_questions_qg(chat: Chat, ql: pl.DataFrame, personas: pl.DataFrame, cfg: QuestionsConfig,
                      embed: Embed) -> tuple[pl.DataFrame, int, dict[str, int | str]]:
    """Q^G from the selected personas with demos from the kept Q^L questions and the seed files:
    generate, transform, dedup against Q^L. Returns the table, the demo pool size and the dedup search summary."""
    kept = ql.filter(pl.col("kept"))
    pool = kept["question"].to_list() + load_seed_questions(cfg.seed_files)
    split = cfg.transform_split
    plan = qg_plan(personas.filter(pl.col("selected")), cfg.n_personas, cfg.questions_per_persona, pool,
                   cfg.icl_demos, (split.keep, split.enrich, split.simplify), cfg.seed)
    rows = transform(chat, generate(chat, plan, cfg.generation_temperature, cfg.seed))
    out, search = dedup_against(rows, kept, embed, cfg.dedup_tau, cfg.dedup_block, ann_search(cfg))
    return out.with_columns(question_id=pl.col("qg_id"), source=pl.lit("generated")), len(pool), search
