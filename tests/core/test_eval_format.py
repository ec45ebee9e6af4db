"""Issue 14.3 (one reply format for every method, step errors and protocol compliance) and 14.4 (a clarify
reply must be a question: `is_question`)."""

import json

import numpy as np
import polars as pl
import pytest

from dagster_project.config import EvaluationConfig
from dagster_project.core.clarifymt.agent.clarify_agent import ClarifyAgent
from dagster_project.core.clarifymt.agent.method import (
    Prediction,
    is_question,
    predictions_frame,
)
from dagster_project.core.clarifymt.agent.registry import BUILDERS, build_method
from dagster_project.core.clarifymt.metrics import (
    clarification_metrics,
    evaluation_tables,
)
from dagster_project.llm.prompts import load_prompt
from tests.core.test_agent_methods import A1, Chat, agent_reply, turn


def _any_reply(req, i):
    """A well-formed reply in whatever format the request asks for."""
    schema = (req.json_schema or {}).get("properties", {})
    if "interpretation" in schema:
        return json.dumps({"interpretation": "same", "clarifying_question": "Which one?"})
    if "ambiguity_type" in schema:
        return json.dumps({"ambiguity_type": "none", "reasoning": "", "decision": "answer", "response": "a"})
    if set(schema) in ({"question"}, {"reply"}, {"ambiguity_types", "reasoning", "decision", "response"}):
        return json.dumps({"question": "Which one?", "reply": "that one", "ambiguity_types": ["semantic"],
                           "reasoning": "", "decision": "clarify", "response": "Which one?"})
    if set(schema) in ({"action", "text"}, {"reasoning", "action", "text"}):
        return json.dumps({"reasoning": "r", "action": "clarify", "text": "Which one?"})
    if schema or "output module" in req.messages[0]["content"]:
        return agent_reply()(req, i)
    if "Interpretation" in req.messages[0]["content"]:
        return "Interpretation: same\nThe clarifying question is: Which one?"
    return "The clarifying question is: Which one?"


@pytest.mark.parametrize("structured", [False, True])
def test_structured_output_applies_to_every_method(structured):
    for name in BUILDERS:
        chat = Chat(_any_reply)
        build_method(name, EvaluationConfig(vote_k=2, intent_k=2, structured_output=structured)).predict(
            [turn("x", 2, A1)], chat, lambda texts: np.ones((len(texts), 3)))
        user_facing = chat.batches[-1]  # the reply the user sees (the agent's Output module; the only call else)
        assert all((r.json_schema is not None) == structured for r in user_facing), name


def test_free_text_without_prefix_and_bad_json_are_both_non_compliant():
    free = build_method("base", EvaluationConfig()).predict([turn()], Chat(lambda r, i: "Sure, here it is."))
    js = build_method("base", EvaluationConfig(structured_output=True)).predict([turn()], Chat(lambda r, i: "{oops"))
    for [p] in (free, js):
        assert (p.action, p.status, p.protocol_ok) == ("invalid", "parse_error", 0.0)


def test_majority_vote_compliance_is_the_share_of_valid_samples():
    texts = ["The clarifying question is: Which?", "The clarifying question is: Where?", "no prefix"]
    [p] = build_method("majority_vote", EvaluationConfig(vote_k=3)).predict([turn()], Chat(lambda r, i: texts[i]))
    assert p.action == "clarify" and p.protocol_ok == pytest.approx(2 / 3)


def test_agent_planner_fallback_is_a_recorded_step_error_not_a_silent_ok():
    [p] = ClarifyAgent(EvaluationConfig()).predict([turn()], Chat(agent_reply("unfilled", planner=lambda _: "??")))
    assert (p.status, p.agent["decided_by"]) == ("ok", "rule_fallback")
    assert "planner" in p.error and "rule" in p.error
    assert p.protocol_ok == pytest.approx(3 / 4)  # input, perceiver, planner, output replied; the planner failed


def test_agent_free_text_output_decides_and_a_reply_without_prefix_is_invalid():
    """Issue 27.1 (was: a contradicting prefix was only a step error): the Output reply is the decision."""
    inner = agent_reply("unfilled")

    def reply(req, i):
        return "Rome is nice." if req.json_schema is None else inner(req, i)

    [p] = ClarifyAgent(EvaluationConfig()).predict([turn()], Chat(reply))
    assert (p.action, p.status) == ("invalid", "parse_error") and "output" in p.trace["step_errors"]
    assert p.protocol_ok < 1 and predictions_frame([p])["is_question"].to_list() == [None]


@pytest.mark.parametrize("text, expected", [
    ("Which city are you flying from?", True), ("Could you tell me the city.", True),
    ("Do you mean the fish or the instrument", True), ("Got it. Where do you want to go", True),
    ("The answer is: Paris.", False), ("Here is a plan for Rome.", False), ("", False), (None, False),
])
def test_is_question_rule(text, expected):
    assert is_question(text) is expected


def _scored(is_q, must=True):
    df = pl.DataFrame({"reference_action": ["clarify", "clarify", "answer"], "action": ["clarify", "clarify", "answer"],
                       "status": ["ok"] * 3, "is_question": [True, is_q, None], "protocol_ok": [1.0, 1.0, 0.5]})
    return clarification_metrics(df, [], must).to_dicts()[0]


def test_a_clarify_reply_that_is_no_question_counts_wrong():
    r = _scored(False)
    assert r["accuracy"] == pytest.approx(2 / 3) and r["not_a_question"] == pytest.approx(1 / 3)
    assert r["question_share"] == 0.5 and r["protocol_compliance"] == pytest.approx(2.5 / 3)
    flagged = _scored(False, must=False)  # evaluation.clarify_must_be_question: false -> only flagged
    assert flagged["accuracy"] == 1.0 and flagged["not_a_question"] == 0 and flagged["question_share"] == 0.5


def test_predictions_frame_checks_only_clarify_replies():
    df = predictions_frame([Prediction("clarify", "The answer is: 4."), Prediction("answer", "4?"),
                            Prediction("clarify", "Which one?")])
    assert df["is_question"].to_list() == [False, None, True]


def test_method_rows_carry_compliance_question_share_n_and_ci():
    pred = pl.DataFrame({"subject": ["s"] * 2, "method": ["m"] * 2, "dialogue_id": ["a", "b"], "turn": [1, 1],
                         "persona": ["precise"] * 2, "subtype": ["x"] * 2, "reference_action": ["clarify"] * 2,
                         "action": ["clarify"] * 2, "status": ["ok"] * 2, "is_question": [True, False],
                         "protocol_ok": [1.0, 0.0]})
    row = evaluation_tables(pred, clarify_must_be_question=True).filter(pl.col("breakdown") == "overall").to_dicts()[0]
    assert (row["n"], row["accuracy"], row["protocol_compliance"], row["question_share"]) == (2, 0.5, 0.5, 0.5)
    assert row["accuracy_ci_low"] < 0.5 < row["accuracy_ci_high"]


def test_the_judge_rubric_scores_a_non_question_zero():
    rubric = load_prompt("judge_question").user
    zero = rubric[rubric.index("0 ="):]
    assert "not a" in zero and "question" in zero
