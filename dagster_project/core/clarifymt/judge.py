"""LLM-as-judge for generated clarifying questions (ClarifyMT-Bench §5.2.2, judge rubric in the appendix).

Pointwise: a 0-5 score of a method's question against the reference clarifying question, on a sample
of clarify turns per subtype (paper: 30). A turn where the method answered (or gave no usable reply)
while the reference asks gets 0 by the rubric's own rule, without a judge call.
Pairwise (ClariLM-style win / tie / lose): two methods' questions for the same turn are judged twice,
with the positions swapped; a method wins only if it wins in both orders, loses only if it loses in
both, and everything else is a tie.
"""

from __future__ import annotations

import random

import polars as pl

from dagster_project.core.clarifymt.agent.method import transcript
from dagster_project.llm.chat import ChatRequest, ChatResult
from dagster_project.llm.parsing import parse_json_object, require_fields
from dagster_project.llm.prompts import load_prompt

SCORE_SCHEMA = {"type": "object", "properties": {"score": {"type": "integer", "enum": [0, 1, 2, 3, 4, 5]}},
                "required": ["score"]}
PAIR_SCHEMA = {"type": "object", "properties": {"better": {"type": "string", "enum": ["first", "second", "tie"]}},
               "required": ["better"]}
EVALUATED = ("ok", "parse_error")


def candidate_turns(pred: pl.DataFrame) -> pl.DataFrame:
    """Turns where the reference asks a clarifying question and the method's reply was evaluated."""
    return pred.filter((pl.col("reference_action") == "clarify") & pl.col("reference_question").is_not_null()
                       & pl.col("status").is_in(EVALUATED))


def sample_items(candidates: pl.DataFrame, per_subtype: int, seed: int) -> pl.DataFrame:
    """The same (dataset, dialogue_id, turn) items for every method: ``per_subtype`` per dataset x subtype."""
    items = candidates.select("dataset", "subtype", "dialogue_id", "turn").unique().sort(
        "dataset", "subtype", "dialogue_id", "turn", nulls_last=True)
    picked = []
    for (_, _), g in items.group_by(["dataset", "subtype"], maintain_order=True):
        rows = g.to_dicts()
        random.Random(seed).shuffle(rows)
        picked += rows[:per_subtype]
    return pl.DataFrame(picked, schema=items.schema).select("dataset", "dialogue_id", "turn")


def has_question(action: str | None, response: str | None) -> bool:
    return action == "clarify" and bool((response or "").strip())


def asked_expr(action: str, response: str) -> pl.Expr:
    """Column expression of has_question: the method asked, with a non-blank question."""
    return (pl.col(action) == "clarify").fill_null(False) & (
        pl.col(response).fill_null("").str.strip_chars().str.len_chars() > 0)


def pointwise_requests(rows: pl.DataFrame) -> list[ChatRequest]:
    """One judge request per row (rows need messages, reference_question, response)."""
    prompt = load_prompt("judge_question")
    return [ChatRequest.of(prompt.messages(dialogue=transcript(r["messages"] or []), reference=r["reference_question"],
                                           candidate=r["response"]),
                           prompt.version, SCORE_SCHEMA, temperature=0.0, max_tokens=16)
            for r in rows.iter_rows(named=True)]


def parse_score(result: ChatResult) -> tuple[int | None, str, str | None]:
    """(score, status, error)."""
    if result.error:
        return None, "llm_error", result.error
    obj, err = parse_json_object(result.text)
    err = err or require_fields(obj, {"score": int})
    if not err and not 0 <= obj["score"] <= 5:
        err = f"score {obj['score']} outside 0-5"
    return (None, "parse_error", err) if err else (obj["score"], "ok", None)


def pairwise_requests(rows: pl.DataFrame) -> list[ChatRequest]:
    """Two requests per row: (A first, B second) then (B first, A second)."""
    prompt = load_prompt("judge_pairwise")
    reqs = []
    for r in rows.iter_rows(named=True):
        d = transcript(r["messages"] or [])
        for first, second in ((r["question_a"], r["question_b"]), (r["question_b"], r["question_a"])):
            reqs.append(ChatRequest.of(prompt.messages(dialogue=d, reference=r["reference_question"], first=first,
                                                       second=second),
                                       prompt.version, PAIR_SCHEMA, temperature=0.0, max_tokens=16))
    return reqs


def parse_verdict(result: ChatResult) -> tuple[str | None, str | None]:
    """('first' | 'second' | 'tie', None) or (None, error)."""
    if result.error:
        return None, result.error
    obj, err = parse_json_object(result.text)
    err = err or require_fields(obj, {"better": str})
    if not err and obj["better"] not in ("first", "second", "tie"):
        err = f"verdict {obj['better']!r} not first/second/tie"
    return (None, err) if err else (obj["better"], None)


def pairwise_outcome(verdict_ab: str | None, verdict_ba: str | None) -> str:
    """Outcome for A. verdict_ab judged (A first, B second); verdict_ba judged (B first, A second).

    A win must hold in both orders (A is 'first' in the first judgement and 'second' in the swapped
    one); likewise a loss; anything else, including a position-biased judge that always prefers the
    first slot, is a tie.
    """
    if verdict_ab == "first" and verdict_ba == "second":
        return "win"
    if verdict_ab == "second" and verdict_ba == "first":
        return "lose"
    return "tie"


def rule_outcome(a_asked: bool, b_asked: bool) -> str | None:
    """Outcome for A when at most one of them asked: asking beats not asking where the reference asks."""
    if a_asked and not b_asked:
        return "win"
    if b_asked and not a_asked:
        return "lose"
    if not a_asked and not b_asked:
        return "tie"
    return None  # both asked: the judge decides
