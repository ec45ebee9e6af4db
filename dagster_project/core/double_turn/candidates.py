"""Candidate responses per training query (§3.1): clarifying questions (clarifier: 1 greedy + n sampled),
the greedy direct answer and the Direct-Ans sampled pool (answerer)."""

from __future__ import annotations

from typing import Any

import polars as pl
from pydantic import Field

from dagster_project.config import DoubleTurnConfig
from dagster_project.core.double_turn.answers import (
    ANSWER,
    Answer,
    answer_of,
    clarify_text,
    few_shot_values,
    pick_shots,
    top_k_answers,
)
from dagster_project.core.double_turn.metrics import normalize_answer
from dagster_project.llm.task import (
    PROVENANCE_SCHEMA,
    Chat,
    LLMTask,
    NonEmpty,
    Outcome,
    Reply,
)


class Clarification(Reply):
    """A clarifying question (the clarifier's reply)."""

    clarifying_question: NonEmpty = Field(json_schema_extra={"minLength": 5, "maxLength": 160})


CLARIFY = LLMTask("double_turn_clarify", role="clarifier", reply=Clarification, sampling={"max_tokens": 80})

CANDIDATE_SCHEMA = {
    "candidate_id": pl.Utf8, "query_id": pl.Utf8, "question": pl.Utf8, "kind": pl.Utf8, "decoding": pl.Utf8,
    "sample_index": pl.Int64, "clarifying_question": pl.Utf8, "answer": pl.Utf8, "text": pl.Utf8,
    "in_pairs": pl.Boolean, "reason": pl.Utf8, "in_topk": pl.Boolean, **PROVENANCE_SCHEMA,
}


def sampling_items(queries: pl.DataFrame, n_sampled: int, sampled: dict[str, Any], greedy: dict[str, Any],
                   extra: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Per query: a greedy item and (when n_sampled > 0) a sampled one with n = n_sampled."""
    items = []
    for q in queries.iter_rows(named=True):
        base = {"query_id": q["query_id"], "question": q["question"], "n_interpretations": q["n_interpretations"],
                **(extra or {}).get(q["query_id"], {})}
        items.append(base | {"decoding": "greedy", "sampling": greedy})
        if n_sampled > 0:
            items.append(base | {"decoding": "sampled", "sampling": sampled | {"n": n_sampled}})
    return items


def candidate_row(o: Outcome[dict[str, Any], Any], candidate_id: str, kind: str, **fields: Any) -> dict[str, Any]:
    """One CANDIDATE_SCHEMA row of a reply (in the pairs when the call and its parse succeeded); `fields` override."""
    it = o.item
    return {"candidate_id": candidate_id, "query_id": it["query_id"], "question": it["question"], "kind": kind,
            "decoding": it["decoding"], "sample_index": o.sample, "clarifying_question": None, "answer": None,
            "text": None, "in_pairs": o.ok, "reason": None if o.ok else o.status.value, "in_topk": None,
            **o.provenance()} | fields


def _clarify_rows(outcomes: list[Outcome[dict[str, Any], Clarification]]) -> list[dict[str, Any]]:
    rows = []
    for o in outcomes:
        start = 0 if o.item["decoding"] == "greedy" else 1
        cq = o.value.clarifying_question.strip() if o.ok and o.value else None
        rows.append(candidate_row(o, f"{o.item['query_id']}:c{start + o.sample}", "clarify", clarifying_question=cq,
                                  text=clarify_text(cq) if cq else None))
    return rows


def _direct_rows(outcomes: list[Outcome[dict[str, Any], Answer]]) -> list[dict[str, Any]]:
    rows = []
    pools: dict[str, list[Outcome[dict[str, Any], Answer]]] = {}
    for o in outcomes:
        if o.item["decoding"] == "greedy":
            ans = answer_of(o)
            rows.append(candidate_row(o, f"{o.item['query_id']}:d", "direct", answer=ans, text=ans))
        else:
            pools.setdefault(o.item["query_id"], []).append(o)
    for qid, pool in pools.items():
        answers = [answer_of(o) for o in pool]
        top = {normalize_answer(a) for a in top_k_answers(answers, pool[0].item["n_interpretations"])}
        marked: set[str] = set()
        for o, ans in zip(pool, answers, strict=True):
            key = normalize_answer(ans) if ans else None
            in_top = bool(key) and key in top and key not in marked
            if in_top:
                marked.add(key)
            rows.append(candidate_row(o, f"{qid}:s{o.sample}", "direct_sample", answer=ans, text=ans, in_pairs=False,
                                      reason="Direct-Ans sampled pool", in_topk=in_top))
    return rows


def candidate_responses(chat: Chat, queries: pl.DataFrame, pool: list[tuple[str, str, str]],
                        cfg: DoubleTurnConfig) -> pl.DataFrame:
    """One row per candidate: clarifying questions (c0 greedy, c1.. sampled), the direct answer (d) and
    the Direct-Ans sampled pool (s0..; ``in_topk`` marks the top-k most frequent, k = number of gold answers).

    ``in_pairs`` says whether a candidate enters the preference pairs; otherwise ``reason`` says why
    (unusable reply, duplicate question, or sampled-pool member). The direct answers use the answerer's
    few-shot chat prompt (shots from training queries only, see answers.shot_pool).
    """
    clarify = CLARIFY.run(
        chat, sampling_items(queries, cfg.n_clarify_sampled, {"temperature": cfg.clarify_temperature, "seed": cfg.seed},
                              {"temperature": 0.0, "seed": cfg.seed}),
        lambda it: {"question": it["question"]}, lambda it: it["sampling"])
    shots = {q: {"shots": pick_shots(pool, q, cfg.n_shots, cfg.seed, 0)} for q in queries["query_id"]}
    sampling = {"seed": cfg.seed, "max_tokens": cfg.answer_max_tokens}
    direct = ANSWER.run(
        chat, sampling_items(queries, cfg.n_direct_samples, sampling | {"temperature": cfg.sample_temperature},
                              sampling | {"temperature": 0.0, "n": 1}, shots),
        few_shot_values, lambda it: it["sampling"])
    return candidate_table(queries, _clarify_rows(clarify) + _direct_rows(direct))


def candidate_table(queries: pl.DataFrame, rows: list[dict[str, Any]]) -> pl.DataFrame:
    """The candidate rows grouped by query (in query order); a clarifying question equal (normalised) to an earlier
    one of its query leaves the pairs as its duplicate."""
    by_query: dict[str, list[dict[str, Any]]] = {q: [] for q in queries["query_id"]}
    for r in rows:
        by_query[r["query_id"]].append(r)
    out = []
    for group in by_query.values():
        seen: dict[str, str] = {}
        for r in group:
            if r["kind"] == "clarify" and r["in_pairs"]:
                key = normalize_answer(r["clarifying_question"])
                if key in seen:
                    r.update(in_pairs=False, reason=f"duplicate of {seen[key]}")
                else:
                    seen[key] = r["candidate_id"]
            out.append(r)
    return pl.DataFrame(out, schema=CANDIDATE_SCHEMA)
