"""ClarifyMT-Bench §4.1: single-turn ambiguous queries + clarifying questions, quality-rated, deduplicated."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import polars as pl
from pydantic import ConfigDict, Field

from dagster_project.config import BenchmarkConfig
from dagster_project.core.clarifymt.external import import_dataset
from dagster_project.core.shared.dedup import Embed, ann_search, semantic_dedup
from dagster_project.core.shared.taxonomy import QUERY_SUBTYPES, SUBTYPE_BY_KEY, Subtype
from dagster_project.llm.task import Chat, LLMTask, NonEmpty, Reply, Status

# Everyday topics rotated across samples so one subtype does not produce n copies of one request.
TOPICS = (
    "travel", "cooking", "personal finance", "health and fitness", "software", "school homework",
    "shopping", "home repair", "music", "sports", "history", "job search", "gardening", "cars",
    "movies and TV", "pets", "science", "event planning",
)


def _sentence() -> Any:
    return Field(json_schema_extra={"minLength": 8, "maxLength": 200})


def _loose_text(max_length: int, default: Any) -> Any:
    """A string in the schema that validation takes as it comes (or leaves out): the old parser only read it."""
    return Field(default, json_schema_extra={"type": "string", "maxLength": max_length})


class GeneratedQuery(Reply):
    """The generator's reply: an ambiguous query, its clarifying question, what is missing (and why).

    The schema asks for every field; validation needs only the first three (explanation may be absent)."""

    model_config = ConfigDict(json_schema_extra={
        "required": ["query", "clarifying_question", "missing_info", "explanation"]})

    query: NonEmpty = _sentence()
    clarifying_question: NonEmpty = _sentence()
    missing_info: list[Any] = Field(json_schema_extra={
        "items": {"type": "string", "maxLength": 40}, "minItems": 1, "maxItems": 4})
    explanation: Any = _loose_text(200, "")


class Rating(Reply):
    """Quality(q) of Eq. 7: a 1-5 score (the reason may be absent)."""

    model_config = ConfigDict(json_schema_extra={"required": ["score", "reason"]})

    score: int = Field(ge=1, le=5)
    reason: Any = _loose_text(160, None)


GENERATE = LLMTask("generate_single_turn", role="generator", reply=GeneratedQuery, sampling={"max_tokens": 320})
RATE = LLMTask("rate_single_turn", role="judge", reply=Rating, sampling={"temperature": 0.0, "max_tokens": 120})

RATING_COLUMNS = {"quality": pl.Int64, "quality_reason": pl.Utf8, "quality_status": pl.Utf8, "quality_raw": pl.Utf8}


def generation_plan(subtypes: list[Subtype], n_per_subtype: int) -> pl.DataFrame:
    """One row per query to generate: subtype, sample index and a topic hint."""
    return pl.DataFrame(
        [
            {"subtype": s.key, "sample": i, "topic_hint": TOPICS[(i + k * 5) % len(TOPICS)]}
            for k, s in enumerate(subtypes)
            for i in range(n_per_subtype)
        ],
        schema={"subtype": pl.Utf8, "sample": pl.Int64, "topic_hint": pl.Utf8},
    )


def _generation_values(row: dict[str, Any], subtypes: dict[str, Subtype]) -> dict[str, Any]:
    s = subtypes[row["subtype"]]
    return {"subtype_name": s.name.lower(), "definition": s.definition, "example": s.example,
            "example_clarification": s.example_clarification, "topic_hint": row["topic_hint"]}


def generate(chat: Chat, plan: pl.DataFrame, subtypes: dict[str, Subtype], temperature: float,
             seed: int = 0) -> pl.DataFrame:
    """One generator call per plan row (seed + sample), sent to the row's `role` (default: generator); one row
    per reply with its status and provenance, `source` = the role."""
    items = plan.to_dicts()
    roles = list(dict.fromkeys(r.get("role", GENERATE.role) for r in items))
    outcomes = [o for role in roles for o in dataclasses.replace(GENERATE, role=role).run(
        chat, [r for r in items if r.get("role", GENERATE.role) == role],
        lambda row: _generation_values(row, subtypes),
        lambda row: {"temperature": temperature, "seed": seed + row["sample"]})]
    rows = []
    for o in outcomes:
        row, v = o.item, o.value
        rows.append({
            **row, "query_id": f"{row['subtype']}-{row['sample']:03d}",
            "query": v.query.strip() if o.ok else None,
            "clarifying_question": v.clarifying_question.strip() if o.ok else None,
            "missing_info": [str(x).strip() for x in v.missing_info if str(x).strip()] if o.ok else [],
            "explanation": (str(v.explanation).strip() or None) if o.ok else None,
            **o.provenance(), "raw_output": o.raw_output or "", "source": row.get("role", GENERATE.role),
        })
    return pl.DataFrame(rows, schema_overrides={"missing_info": pl.List(pl.Utf8), "query": pl.Utf8,
                                                "clarifying_question": pl.Utf8, "explanation": pl.Utf8,
                                                "error": pl.Utf8, "raw_output": pl.Utf8})


def assign_roles(n: int, generators: list[tuple[str, float]], seed: int) -> list[str]:
    """n plan rows apportioned to generator roles by share (largest remainder), in a seeded order."""
    quotas = [share * n for _, share in generators]
    counts = [int(q) for q in quotas]
    for i in sorted(range(len(quotas)), key=lambda i: counts[i] - quotas[i])[: n - sum(counts)]:
        counts[i] += 1
    roles = [role for (role, _), c in zip(generators, counts, strict=True) for _ in range(c)]
    random.Random(seed).shuffle(roles)
    return roles


# CLAMBER's subclasses -> the nearest ClarifyMT query subtype (a choice: the paper does not say how it mapped them).
SEED_SUBTYPES = {
    "polysemy": "lexical", "lexical": "lexical", "semantic": "semantic", "co-reference": "entity",
    "coreference": "entity", "whom": "entity", "what": "goal", "when": "temporal", "where": "spatial",
    "nk": "unfamiliarity", "unfamiliar": "unfamiliarity", "icl": "intent_conflict",
    "contradiction": "intent_conflict",
}


def seed_items(turns: pl.DataFrame, chosen: list[str], n: int, seed: int) -> pl.DataFrame:
    """Up to n clarify items of an imported dataset whose subtype maps onto a chosen one (seeded pick):
    subtype, query (the user's message), clarifying_question."""
    usable = [
        {"subtype": SEED_SUBTYPES.get((r["subtype"] or "").lower(), (r["subtype"] or "").lower()),
         "query": r["messages"][-1]["content"], "clarifying_question": r["reference_question"]}
        for r in turns.filter((pl.col("turn") == 1) & (pl.col("reference_action") == "clarify")
                              & pl.col("reference_question").is_not_null()).iter_rows(named=True)]
    usable = [u for u in usable if u["subtype"] in chosen]
    random.Random(seed).shuffle(usable)
    return pl.DataFrame(usable[:n], schema={"subtype": pl.Utf8, "query": pl.Utf8, "clarifying_question": pl.Utf8})


def place_seeds(plan: pl.DataFrame, seeds: pl.DataFrame, source: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Each seed item takes the last free plan row of its subtype (so every subtype keeps n rows):
    (the remaining plan, the seed rows in the generated rows' schema). Seeds with no free row are left out."""
    free = {k: sorted(g["sample"].to_list()) for (k,), g in plan.group_by("subtype")}
    rows = []
    for s in seeds.iter_rows(named=True):
        if free.get(s["subtype"]):
            i = free[s["subtype"]].pop()
            rows.append({"subtype": s["subtype"], "sample": i, "query_id": f"{s['subtype']}-{i:03d}",
                         "query": s["query"], "clarifying_question": s["clarifying_question"], "missing_info": [],
                         "status": Status.OK.value, "source": source})
    placed = pl.DataFrame(rows, schema={"subtype": pl.Utf8, "sample": pl.Int64, "query_id": pl.Utf8,
                                        "query": pl.Utf8, "clarifying_question": pl.Utf8,
                                        "missing_info": pl.List(pl.Utf8), "status": pl.Utf8, "source": pl.Utf8})
    return plan.join(placed.select("subtype", "sample"), on=["subtype", "sample"], how="anti"), placed


def rate(chat: Chat, rows: pl.DataFrame, subtypes: dict[str, Subtype]) -> pl.DataFrame:
    """Quality(q) of Eq. 7, one row per input row: quality (1-5, null when unusable), reason, status, raw reply."""
    outcomes = RATE.run(chat, rows.to_dicts(), lambda r: {
        "subtype_name": subtypes[r["subtype"]].name, "query": r["query"],
        "definition": subtypes[r["subtype"]].definition, "clarifying_question": r["clarifying_question"]})
    return pl.DataFrame([{"quality": o.value.score if o.ok else None,
                          "quality_reason": o.value.reason if o.ok else None,
                          "quality_status": o.status.value, "quality_raw": o.raw_output or ""} for o in outcomes],
                        schema=RATING_COLUMNS)


def single_turn_queries(chat: Chat, cfg: BenchmarkConfig, embed: Embed,
                        seed: int = 0) -> tuple[pl.DataFrame, dict[str, int]]:
    """Generate (by generator role and share, plus a seed share from an imported dataset, App. B), rate and
    deduplicate (§4.1); every row stays, with `source` and the dedup / source summary for metadata.

    `kept` is true for the representatives; others carry `dedup_reason` (exact / semantic) and
    `duplicate_of`, or a non-ok `status` when the reply could not be used."""
    chosen = [s for s in QUERY_SUBTYPES if cfg.subtypes is None or s.key in cfg.subtypes]
    plan = generation_plan(chosen, cfg.n_per_subtype)
    sources: dict[str, int] = {}
    seeds = None
    if cfg.seed_dataset is not None and cfg.seed_dataset.share > 0:
        ds = cfg.seed_dataset
        turns = import_dataset(ds.name, ds.format, ds.path, key="benchmark.seed_dataset").turns
        wanted = round(ds.share * plan.height)
        plan, seeds = place_seeds(plan, seed_items(turns, [s.key for s in chosen], wanted, seed), ds.name)
        sources |= {"seed_items_wanted": wanted, "seed_items_used": seeds.height}
    plan = plan.with_columns(role=pl.Series(assign_roles(plan.height, [(g.role, g.share) for g in cfg.generators],
                                                         seed), dtype=pl.Utf8))
    rows = generate(chat, plan, SUBTYPE_BY_KEY, cfg.generation_temperature, seed).drop("role")
    if seeds is not None and seeds.height:
        rows = pl.concat([rows, seeds], how="diagonal_relaxed")
    ok = rows.filter(pl.col("status") == Status.OK.value)
    rated = ok.hstack(rate(chat, ok, SUBTYPE_BY_KEY))
    dd = semantic_dedup(rated["query"].to_list(), rated["quality"].fill_null(0).to_list(), embed,
                        cfg.dedup_tau, cfg.dedup_block, ann_search(cfg))
    ids = rated["query_id"]
    rated = rated.with_columns(
        kept=dd.table["kept"], dedup_reason=dd.table["dedup_reason"], similarity=dd.table["similarity"],
        duplicate_of=pl.Series([ids[d] if d >= 0 else None for d in dd.table["duplicate_of"]], dtype=pl.Utf8),
    )
    failed = rows.filter(pl.col("status") != Status.OK.value).with_columns(kept=pl.lit(False))
    out = pl.concat([rated, failed], how="diagonal_relaxed").sort("query_id")
    sources |= {f"source/{k}": v for k, v in out.group_by("source").len().sort("source").iter_rows()}
    return out, dd.summary() | sources
