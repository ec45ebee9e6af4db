"""Issue 14.7: Intent-Sim and AT-CoT as their original papers describe; the earlier variants stay as named
alternatives (intent_sim_interpretations, at_cot_subtypes)."""

import json
import math

import numpy as np
import pytest

from dagster_project.config import EvaluationConfig
from dagster_project.core.clarifymt.agent.at_cot import ATCoT, parse_at_cot_text
from dagster_project.core.clarifymt.agent.intent_sim import (
    IntentSim,
    intent_entropy,
    intent_groups,
)
from dagster_project.core.clarifymt.agent.registry import build_method
from tests.core.test_agent_methods import A1, Chat, turn


def test_intent_groups_and_entropy_by_hand():
    v = np.array([[1, 0], [0.9, 0.1], [0, 1], [0.1, 0.9], [1, 0.05]])
    groups = intent_groups(v, tau=0.5)
    assert groups == [[0, 1, 4], [2, 3]]
    assert intent_entropy(groups) == pytest.approx(-(0.6 * math.log(0.6) + 0.4 * math.log(0.4)))
    assert intent_entropy(intent_groups(v, tau=-1.0)) == 0.0  # everything one intent


def _intent_chat(user_answers, answer="The answer is: Porto in May."):
    def reply(req, i):
        system = req.messages[0]["content"]
        if "You play the user" in system:
            return user_answers[i]
        if "best settle" in system:
            return "The clarifying question is: Which city do you mean?"
        return answer
    return Chat(reply)


def _embed(vectors):
    return lambda texts: np.array([vectors[t.split("? ", 1)[1]] for t in texts], dtype=float)


def test_intent_sim_asks_its_question_when_simulated_intents_disagree():
    chat = _intent_chat(["Porto", "Lisbon", "Porto"])
    [p] = IntentSim(EvaluationConfig(intent_k=3)).predict(
        [turn()], chat, _embed({"Porto": [1, 0], "Lisbon": [0, 1]}))
    assert (p.action, p.response, p.status) == ("clarify", "Which city do you mean?", "ok")
    assert p.trace["groups"] == [[0, 2], [1]] and p.trace["entropy"] > 0
    assert len(chat.batches) == 2 and p.llm_calls == 1 + 3  # no answer call when it asks
    assert chat.batches[1][0].sampling.n == 3 and chat.batches[1][0].sampling.temperature == 0.7
    assert "Which city do you mean?" in chat.batches[1][0].messages[-1]["content"]
    assert p.protocol_ok == 1.0


def test_intent_sim_answers_when_every_simulated_intent_agrees():
    chat = _intent_chat(["Porto", "Porto, surely", "Porto"])
    [p] = IntentSim(EvaluationConfig(intent_k=3)).predict(
        [turn("d", 2, A1)], chat, _embed({"Porto": [1, 0], "Porto, surely": [0.95, 0.1]}))
    assert (p.action, p.response) == ("answer", "Porto in May.") and p.trace["entropy"] == 0
    assert len(chat.batches) == 3 and p.llm_calls == 1 + 3 + 1


def test_intent_sim_without_a_question_is_a_parse_error():
    [p] = IntentSim(EvaluationConfig(intent_k=3)).predict(
        [turn()], Chat(lambda r, i: "Sure!"), _embed({}))
    assert (p.action, p.status, p.protocol_ok) == ("invalid", "parse_error", 0.0)


def test_at_cot_uses_the_original_action_based_taxonomy_with_several_types():
    chat = Chat(lambda r, i: "Ambiguity types: Semantic, specify\nTwo readings.\nThe clarifying question is: Which?")
    [p] = ATCoT(EvaluationConfig()).predict([turn()], chat)
    system = chat.batches[0][0].messages[0]["content"]
    assert all(f"- {k}:" in system for k in ("semantic", "generalize", "specify")) and "- lexical:" not in system
    assert (p.action, p.trace["ambiguity_types"]) == ("clarify", ["semantic", "specify"])
    schema = ATCoT(EvaluationConfig(structured_output=True)).taxonomy.json.schema
    assert schema["properties"]["ambiguity_types"]["items"]["enum"] == ["semantic", "generalize", "specify", "none"]


def test_at_cot_json_keeps_every_named_type():
    reply = json.dumps({"ambiguity_types": ["generalize", "specify"], "reasoning": "r", "decision": "answer",
                        "response": "Here."})
    [p] = ATCoT(EvaluationConfig(structured_output=True)).predict([turn()], Chat(lambda r, i: reply))
    assert (p.action, p.trace["ambiguity_types"], p.protocol_ok) == ("answer", ["generalize", "specify"], 1.0)


def test_the_earlier_variants_stay_as_named_methods():
    assert build_method("at_cot_subtypes", EvaluationConfig()).taxonomy.multiple is False
    p, trace = parse_at_cot_text("Ambiguity type: lexical\nThe answer is: x")
    assert trace["ambiguity_type"] == "lexical" and p.action == "answer"
    assert build_method("intent_sim_interpretations", EvaluationConfig()).name == "intent_sim_interpretations"
