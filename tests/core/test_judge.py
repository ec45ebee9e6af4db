"""LLM-as-judge helpers (core/judge.py): sampling, score parsing, position-swapped pairwise outcomes."""

import json

import polars as pl
import pytest

from dagster_project.llm.chat import ChatResult
from dagster_project.core.clarifymt.judge import (
    asked_expr, candidate_turns, has_question, pairwise_outcome, pairwise_requests, parse_score, parse_verdict,
    pointwise_requests, rule_outcome, sample_items,
)


@pytest.mark.parametrize("ab, ba, outcome", [
    ("first", "second", "win"),     # A preferred in both orders
    ("second", "first", "lose"),    # B preferred in both orders
    ("first", "first", "tie"),      # the judge prefers whatever comes first: no real preference
    ("second", "second", "tie"),
    ("tie", "second", "tie"),
    ("first", "tie", "tie"),
    (None, "second", "tie"),
])
def test_pairwise_outcome_needs_both_orders(ab, ba, outcome):
    assert pairwise_outcome(ab, ba) == outcome


def test_rule_outcome():
    assert rule_outcome(True, False) == "win" and rule_outcome(False, True) == "lose"
    assert rule_outcome(False, False) == "tie" and rule_outcome(True, True) is None


def test_parse_score_and_verdict():
    assert parse_score(ChatResult(texts=['{"score": 4}'])) == (4, "ok", None)
    assert parse_score(ChatResult(texts=['{"score": 9}']))[1:] == ("parse_error", "score 9 outside 0-5")
    assert parse_score(ChatResult(texts=["four"]))[1] == "parse_error"
    assert parse_score(ChatResult(texts=[""], error="down")) == (None, "llm_error", "down")
    assert parse_verdict(ChatResult(texts=['{"better": "second"}'])) == ("second", None)
    assert parse_verdict(ChatResult(texts=['{"better": "both"}']))[0] is None


def _cands():
    rows = []
    for method in ("base", "agent"):
        for sub in ("lexical", "scope"):
            for i in range(3):
                rows.append({"dataset": "d", "subject": "s", "method": method, "dialogue_id": f"{sub}-{i}", "turn": 1,
                             "subtype": sub, "reference_action": "clarify", "reference_question": "Which?",
                             "status": "ok", "action": "clarify", "response": "Which one?"})
    rows.append({**rows[0], "reference_question": None, "dialogue_id": "noref"})
    rows.append({**rows[0], "status": "llm_error", "dialogue_id": "err"})
    rows.append({**rows[0], "reference_action": "answer", "dialogue_id": "ans"})
    return pl.DataFrame(rows)


def test_candidates_and_sampling_are_paired_across_methods():
    c = candidate_turns(_cands())
    assert c.height == 12 and not set(c["dialogue_id"]) & {"noref", "err", "ans"}
    items = sample_items(c, 2, seed=3)
    assert items.height == 4  # 2 per subtype, shared by both methods
    assert sorted(items["dialogue_id"].str.split("-").list.first().to_list()) == ["lexical"] * 2 + ["scope"] * 2
    assert items.equals(sample_items(c, 2, seed=3))
    assert sample_items(c, 10, seed=0).height == 6 and sample_items(c, 0, seed=0).height == 0


def test_has_question():
    assert has_question("clarify", "Which?") and not has_question("clarify", "  ")
    assert not has_question("answer", "Which?") and not has_question("invalid", None)


def test_request_contents():
    row = pl.DataFrame([{"messages": [{"role": "user", "content": "Tell me about bass."}],
                         "reference_question": "Fish or instrument?", "response": "Which bass?",
                         "question_a": "Which bass?", "question_b": "Why?"}])
    [req] = pointwise_requests(row)
    text = req.messages[-1]["content"]
    assert "User: Tell me about bass." in text and "Fish or instrument?" in text and "Which bass?" in text
    assert req.json_schema["properties"]["score"]["enum"] == [0, 1, 2, 3, 4, 5]
    first, second = pairwise_requests(row)
    assert "First candidate: Which bass?" in first.messages[-1]["content"]
    assert "First candidate: Why?" in second.messages[-1]["content"]  # positions swapped
    assert json.dumps(first.json_schema)


def test_asked_expr_matches_has_question():
    df = pl.DataFrame({"a": ["clarify", "clarify", "answer", None], "r": ["Which?", " ", "Which?", "x"]})
    assert df.select(asked_expr("a", "r"))["a"].to_list() == [has_question(a, r) for a, r in df.iter_rows()]
