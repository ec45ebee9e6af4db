"""ClariLM §3.2 Clarification Facet Detection (CFD): FM-LOG, FM-LLM and their fusion.

FM-LOG: the paper fine-tunes a facet miner on the (q_i, c, q_{i+1}, f) tuples mined from logs and samples
k facets per question. By default the extractor role stands in for the fine-tuned miner: it is prompted with
log-mined tuples as demonstrations (the same input -> output pairs the SFT trains on, see `fm_log_training_pairs`)
and sampled k times; identical facets are removed (exact dedup). The step asks role `extractor:fm_log`, which falls
back to `extractor`: pointing it at `training/fm_log` (the training group's FM-LOG SFT) serves the trained miner
with the same prompt, while the logs group's extraction keeps the prompted `extractor` (docs/fm-log.md).
FM-LLM: a strong model (generator role) brainstorms facets with clarifying questions in one call.
Fusion: F(x) = dedup(F_log(x) U F_llm(x)) with semantic dedup per question; each facet keeps its origin.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Annotated, Any

import numpy as np
import polars as pl
from pydantic import ValidationError, WithJsonSchema

from dagster_project.core.shared.dedup import (
    DEFAULT_ANN,
    NO_SEARCH,
    AnnSearch,
    Embed,
    merge_searches,
    normalise,
    semantic_dedup,
)
from dagster_project.llm.task import (
    Chat,
    LLMTask,
    NonEmpty,
    Reply,
    Status,
    reply_schema,
    text_field,
)


class Facet(Reply):
    """One facet with the clarifying question that asks about it (FM-LOG's output, an FM-LLM item)."""

    facet: NonEmpty = text_field(60)
    clarifying_question: NonEmpty = text_field(160)


def facet_list(max_facets: int) -> type[Reply]:
    """FM-LLM's reply: up to max_facets facets. Items are validated one by one (a bad item is skipped)."""
    items = {**reply_schema(Facet)}
    schema = {"type": "array", "minItems": 1, "maxItems": max_facets, "items": items}

    class FacetList(Reply):
        facets: Annotated[list[Any], WithJsonSchema(schema)]

    return FacetList


FM_LOG_ROLE = "extractor:fm_log"  # a named extractor: unset, llm.roles.extractor answers
FM_LOG = LLMTask("clarilm_fm_log", role=FM_LOG_ROLE, reply=Facet, sampling={"max_tokens": 120})
FM_LLM = LLMTask("clarilm_fm_llm", role="generator", sampling={"temperature": 0.7})


FACET_COLUMNS = {
    "facet_id": pl.Utf8, "question_id": pl.Utf8, "question": pl.Utf8, "question_source": pl.Utf8,
    "origin": pl.Utf8, "sample": pl.Int64, "facet": pl.Utf8, "clarifying_question": pl.Utf8,
    "status": pl.Utf8, "error": pl.Utf8, "raw_output": pl.Utf8, "model": pl.Utf8, "prompt_version": pl.Utf8,
}


def fm_log_training_pairs(tuples: pl.DataFrame) -> pl.DataFrame:
    """FM-LOG's SFT data (Eq. 2): input q_i, output the facet f and clarifying question c."""
    return tuples.filter(pl.col("kept")).select(
        pl.col("q_i").alias("query"), "facet", pl.col("c").alias("clarifying_question"))


def demo_block(picked: list[dict[str, Any]]) -> str:
    """The FM-LOG prompt's $examples: one line per (query, facet, clarifying_question) demonstration."""
    if not picked:
        return "(no logged examples)"
    return "\n".join(f'- Request: "{r["query"]}" -> facet: "{r["facet"]}", question: "{r["clarifying_question"]}"'
                     for r in picked)


def _demos(pairs: pl.DataFrame, n: int, rng: random.Random) -> str:
    rows = pairs.to_dicts()
    return demo_block(rng.sample(rows, min(n, len(rows))))


def _base(q: dict[str, Any]) -> dict[str, Any]:
    return {"question_id": q["question_id"], "question": q["question"], "question_source": q["question_source"]}


def fm_log(chat: Chat, questions: pl.DataFrame, pairs: pl.DataFrame, k: int, n_demos: int, temperature: float,
           top_p: float, seed: int = 0) -> pl.DataFrame:
    """k sampled (facet, question) per question (one request with n=k), then exact dedup within each question."""
    rng = random.Random(seed)
    out = FM_LOG.run(chat, questions.to_dicts(),
                     lambda q: {"question": q["question"], "examples": _demos(pairs, n_demos, rng)},
                     lambda q: {"temperature": temperature, "top_p": top_p, "seed": seed, "n": k})
    rows = [_base(o.item) | {"facet_id": f"{o.item['question_id']}:log:{o.sample}", "origin": "log",
                             "sample": o.sample, "facet": o.value.facet.strip() if o.ok else None,
                             "clarifying_question": o.value.clarifying_question.strip() if o.ok else None,
                             **o.provenance()} for o in out]
    return exact_dedup_per_question(pl.DataFrame(rows, schema=FACET_COLUMNS))


def exact_dedup_per_question(df: pl.DataFrame) -> pl.DataFrame:
    """FM-LOG inference step: drop facets identical (after normalisation) to an earlier sample of the same question."""
    key = pl.Series([normalise(f) if f else None for f in df["facet"]], dtype=pl.Utf8)
    df = df.with_columns(_key=key)
    first = (df.filter(pl.col("status") == Status.OK.value).group_by("question_id", "_key", maintain_order=True)
             .agg(rep=pl.col("facet_id").first()))
    df = df.join(first, on=["question_id", "_key"], how="left")
    ok = pl.col("status") == Status.OK.value
    return df.with_columns(
        kept=ok & (pl.col("rep") == pl.col("facet_id")),
        duplicate_of=pl.when(ok & (pl.col("rep") != pl.col("facet_id"))).then(pl.col("rep")),
        reject_reason=pl.when(~ok).then(pl.col("status"))
        .when(pl.col("rep") != pl.col("facet_id")).then(pl.lit("exact_duplicate")),
    ).drop("_key", "rep").sort("facet_id")


def _valid_facets(items: list[Any]) -> list[Facet]:
    out = []
    for item in items:
        try:
            out.append(Facet.model_validate(item))
        except ValidationError:
            continue
    return out


def fm_llm(chat: Chat, questions: pl.DataFrame, max_facets: int, seed: int = 0) -> pl.DataFrame:
    """One brainstorm per question: a row per valid facet; a failed reply is one row with its status."""
    task = FM_LLM.with_reply(facet_list(max_facets))
    task = dataclasses.replace(task, check=lambda v, _: None if _valid_facets(v.facets)
                               else "no item with a facet and a clarifying question")
    out = task.run(chat, questions.to_dicts(), lambda q: {"question": q["question"], "max_facets": max_facets},
                   lambda q: {"seed": seed, "max_tokens": 110 * max_facets})
    rows = []
    for o in out:
        common = _base(o.item) | {"origin": "llm", **o.provenance()}
        if not o.ok:
            rows.append(common | {"facet_id": f"{o.item['question_id']}:llm:x", "sample": None, "facet": None,
                                  "clarifying_question": None})
            continue
        for i, f in enumerate(_valid_facets(o.value.facets)):
            rows.append(common | {"facet_id": f"{o.item['question_id']}:llm:{i}", "sample": i,
                                  "facet": f.facet.strip(), "clarifying_question": f.clarifying_question.strip()})
    return exact_dedup_per_question(pl.DataFrame(rows, schema=FACET_COLUMNS))


def fuse(log: pl.DataFrame, llm: pl.DataFrame, embed: Embed, tau: float, block: int,
         ann: AnnSearch = DEFAULT_ANN) -> tuple[pl.DataFrame, dict[str, int | str]]:
    """F(x) = dedup(F_log(x) U F_llm(x)): semantic dedup within each question over 'facet: question' texts.

    Log facets win ties (they are the realistic ones); a kept facet lists the origins it absorbed.
    Texts are embedded once for all questions; dedup then runs per question on those vectors.
    """
    cols = ["facet_id", "question_id", "question", "question_source", "origin", "facet", "clarifying_question"]
    pool = pl.concat([log.filter(pl.col("kept")).select(cols), llm.filter(pl.col("kept")).select(cols)])
    if pool.height == 0:
        return pool.with_columns(kept=pl.lit(True), duplicate_of=pl.lit(None, pl.Utf8),
                                 similarity=pl.lit(None, pl.Float64), dedup_reason=pl.lit(None, pl.Utf8),
                                 merged_origins=pl.lit([], pl.List(pl.Utf8))), dict(NO_SEARCH)
    texts = [f"{f}: {c}" for f, c in zip(pool["facet"], pool["clarifying_question"])]
    vecs = embed(texts)
    pos = {t: i for i, t in enumerate(texts)}
    lookup: Embed = lambda ts: np.stack([vecs[pos[t]] for t in ts])  # noqa: E731
    pool = pool.with_columns(_text=pl.Series(texts), _row=pl.int_range(pl.len()))
    frames, searches = [], []
    for qid in pool["question_id"].unique(maintain_order=True):
        part = pool.filter(pl.col("question_id") == qid)
        quality = [2.0 if o == "log" else 1.0 for o in part["origin"]]
        dedup = semantic_dedup(part["_text"].to_list(), quality, lookup, tau, block, ann)
        res = dedup.table
        searches.append(dedup.search)
        ids = part["facet_id"].to_list()
        part = part.with_columns(
            kept=res["kept"], similarity=res["similarity"], dedup_reason=res["dedup_reason"],
            duplicate_of=pl.Series([ids[d] if d >= 0 else None for d in res["duplicate_of"]], dtype=pl.Utf8),
            _cluster=pl.Series([ids[c] for c in res["cluster"]], dtype=pl.Utf8))
        origins = part.group_by("_cluster").agg(merged_origins=pl.col("origin").unique().sort())
        part = part.join(origins, on="_cluster", how="left").with_columns(
            merged_origins=pl.when(pl.col("kept")).then(pl.col("merged_origins")))
        frames.append(part)
    return pl.concat(frames).sort("_row").drop("_text", "_row", "_cluster"), merge_searches(searches)

