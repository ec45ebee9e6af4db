"""Preference labelling: double-turn scores (the answer after each user's reply, EM per user), the
standard single-turn judge, and every candidate pair per query under both labelings (§3.1)."""

from __future__ import annotations

from itertools import combinations
from typing import Annotated, Any

import polars as pl
from pydantic import Field, WithJsonSchema

from dagster_project.core.double_turn.answers import answer_of, answers_after
from dagster_project.core.double_turn.metrics import exact_match
from dagster_project.core.double_turn.simulation import SchemaRequired
from dagster_project.llm.task import PROVENANCE_SCHEMA, Chat, LLMTask, Status

OUTCOME_SCHEMA = {
    "outcome_id": pl.Utf8, "candidate_id": pl.Utf8, "query_id": pl.Utf8, "kind": pl.Utf8, "user_index": pl.Int64,
    "expected_answer": pl.Utf8, "user_reply": pl.Utf8, "outcome": pl.Utf8, "prediction": pl.Utf8, "em": pl.Float64,
    "candidate_score": pl.Float64, "scored": pl.Boolean, **PROVENANCE_SCHEMA,
}


def double_turn_outcomes(chat: Chat, qa: pl.DataFrame, candidates: pl.DataFrame, sims: pl.DataFrame,
                         max_tokens: int) -> pl.DataFrame:
    """One row per (candidate in the pairs, user): EM of the final answer against that user's y_i.

    Clarifying candidates: the answerer's answer after the user's reply (an abstained user scores 0, no
    call). Direct answers: the same answer is scored against every user. candidate_score = mean EM over
    the query's users; ``scored`` is false when an LLM call failed for one of its users (then it is
    left out of the pairs rather than counted wrong).
    """
    qinfo = {q["query_id"]: q for q in qa.iter_rows(named=True)}
    sim_rows = {s["sim_id"]: s for s in sims.iter_rows(named=True)}
    items = [{"sim_id": s["sim_id"], "question": qinfo[s["query_id"]]["question"],
              "clarifying_question": s["clarifying_question"], "reply": s["reply"]}
             for s in sims.filter(~pl.col("abstained")).iter_rows(named=True)]
    finals = {o.item["sim_id"]: o for o in answers_after(chat, items, max_tokens)}
    rows = []
    for c in candidates.filter(pl.col("in_pairs")).iter_rows(named=True):
        q = qinfo[c["query_id"]]
        for i, (gold, aliases) in enumerate(zip(q["gold_answers"], q["answers"], strict=True)):
            row = {"outcome_id": f"{c['candidate_id']}:u{i}", "candidate_id": c["candidate_id"],
                   "query_id": c["query_id"], "kind": c["kind"], "user_index": i, "expected_answer": gold,
                   "user_reply": None, "prediction": None, "error": None, "raw_output": None, "model": None,
                   "prompt_version": None}
            if c["kind"] == "direct":
                row.update(outcome="direct", prediction=c["answer"], status=Status.OK.value, model=c["model"],
                           prompt_version=c["prompt_version"], raw_output=c["raw_output"])
            else:
                sim = sim_rows.get(row["outcome_id"])
                if sim is None or sim["abstained"]:
                    reason = sim["abstain_reason"] if sim else "not simulated"
                    failed = reason == Status.LLM_ERROR.value
                    row.update(outcome="failed" if failed else "abstained", user_reply=sim["reply"] if sim else None,
                               status=Status.LLM_ERROR.value if failed else "abstained", error=f"user {reason}")
                else:
                    o = finals[row["outcome_id"]]
                    row.update(outcome="failed" if o.status is Status.LLM_ERROR else "answered",
                               user_reply=sim["reply"], prediction=answer_of(o), **o.provenance())
            row["em"] = 1.0 if row["prediction"] is not None and exact_match(row["prediction"], aliases) else 0.0
            rows.append(row)
    df = pl.DataFrame(rows, schema={k: v for k, v in OUTCOME_SCHEMA.items()
                                    if k not in ("candidate_score", "scored")})
    df = df.with_columns(
        candidate_score=pl.col("em").mean().over("candidate_id"),
        scored=~(pl.col("outcome") == "failed").any().over("candidate_id"),
    )
    return df.select(list(OUTCOME_SCHEMA))


# --------------------------------------------------------------------------- single-turn judgements

class JudgeScore(SchemaRequired):
    """The judge's 1-10 score of one response seeing only the query (the reason is optional to read)."""

    score: int = Field(json_schema_extra={"minimum": 1, "maximum": 10})
    reason: Annotated[Any, WithJsonSchema({"type": "string", "maxLength": 80})] = ""


def _in_range(value: JudgeScore, _item: Any) -> str | None:
    return None if 1 <= value.score <= 10 else f"score {value.score} outside 1-10"


JUDGE = LLMTask("double_turn_judge", role="judge", reply=JudgeScore, check=_in_range,
                sampling={"temperature": 0.0, "max_tokens": 60})

SCORE_SCHEMA = {"candidate_id": pl.Utf8, "query_id": pl.Utf8, "kind": pl.Utf8, "text": pl.Utf8,
                "judge_score": pl.Float64, "judge_reason": pl.Utf8, **PROVENANCE_SCHEMA}


def single_turn_scores(chat: Chat, candidates: pl.DataFrame) -> pl.DataFrame:
    """The standard single-turn scheme: the judge sees only the query and one response (no future turn)."""
    out = JUDGE.run(chat, candidates.to_dicts(), lambda c: {"question": c["question"], "response": c["text"]})
    rows = [{k: o.item[k] for k in ("candidate_id", "query_id", "kind", "text")}
            | {"judge_score": float(o.value.score) if o.ok and o.value else None,
               "judge_reason": str(o.value.reason) if o.ok and o.value else None, **o.provenance()}
            for o in out]
    return pl.DataFrame(rows, schema=SCORE_SCHEMA)


# --------------------------------------------------------------------------- preference pairs

def prefer(a: dict[str, Any], b: dict[str, Any], direct_wins_ties: bool) -> tuple[dict[str, Any] | None, str]:
    """(preferred candidate or None, reason). Higher score wins; on a tie between a clarifying question
    and a direct answer the direct answer wins when ``direct_wins_ties`` (double-turn rule)."""
    if a["score"] is None or b["score"] is None:
        return None, "unscored candidate"
    if a["score"] != b["score"]:
        return (a if a["score"] > b["score"] else b), "higher score"
    if direct_wins_ties and {a["kind"], b["kind"]} == {"clarify", "direct"}:
        return (a if a["kind"] == "direct" else b), "tie: direct answer preferred"
    return None, "tie"


PAIR_SCHEMA = {
    "pair_id": pl.Utf8, "query_id": pl.Utf8, "question": pl.Utf8, "labeling": pl.Utf8, "pair_type": pl.Utf8,
    "candidate_a": pl.Utf8, "candidate_b": pl.Utf8, "chosen_id": pl.Utf8, "rejected_id": pl.Utf8,
    "chosen_kind": pl.Utf8, "rejected_kind": pl.Utf8, "chosen_text": pl.Utf8, "rejected_text": pl.Utf8,
    "chosen_score": pl.Float64, "rejected_score": pl.Float64, "kept": pl.Boolean, "reason": pl.Utf8,
    "n_candidates": pl.Int64,
}


def _side(c: dict[str, Any] | None, key: str) -> Any:
    return c[key] if c else None


def label_pairs(cands: pl.DataFrame, labeling: str, direct_wins_ties: bool) -> pl.DataFrame:
    """Every unordered pair of a query's candidates (n choose 2 rows per query); ``kept`` pairs have a
    chosen and a rejected side. ``cands``: query_id, question, candidate_id, kind, text, score."""
    rows = []
    for (qid,), group in cands.sort("candidate_id").group_by(["query_id"], maintain_order=True):
        items = group.to_dicts()
        for a, b in combinations(items, 2):
            win, reason = prefer(a, b, direct_wins_ties)
            lose = (b if win is a else a) if win is not None else None
            rows.append({
                "pair_id": f"{labeling}:{a['candidate_id']}|{b['candidate_id']}", "query_id": qid,
                "question": a["question"], "labeling": labeling,
                "pair_type": "clarify_vs_clarify" if a["kind"] == b["kind"] == "clarify" else "clarify_vs_direct",
                "candidate_a": a["candidate_id"], "candidate_b": b["candidate_id"],
                "chosen_id": _side(win, "candidate_id"), "rejected_id": _side(lose, "candidate_id"),
                "chosen_kind": _side(win, "kind"), "rejected_kind": _side(lose, "kind"),
                "chosen_text": _side(win, "text"), "rejected_text": _side(lose, "text"),
                "chosen_score": _side(win, "score"), "rejected_score": _side(lose, "score"),
                "kept": win is not None, "reason": reason, "n_candidates": len(items),
            })
    return pl.DataFrame(rows, schema=PAIR_SCHEMA)


def preference_pairs(candidates: pl.DataFrame, outcomes: pl.DataFrame, judged: pl.DataFrame) -> pl.DataFrame:
    """All candidate pairs per query under both labelings: double_turn (ties go to the direct answer; a
    candidate with a failed user call is unscored) and single_turn (the judge's score)."""
    cands = candidates.filter(pl.col("in_pairs")).select("query_id", "question", "candidate_id", "kind", "text")
    double = outcomes.group_by("candidate_id").agg(
        pl.when(pl.col("scored").all()).then(pl.col("candidate_score").first()).alias("score"))
    single = judged.select("candidate_id", pl.col("judge_score").alias("score"))
    return pl.concat([
        label_pairs(cands.join(double, on="candidate_id", how="left"), "double_turn", direct_wins_ties=True),
        label_pairs(cands.join(single, on="candidate_id", how="left"), "single_turn", direct_wins_ties=False),
    ])
