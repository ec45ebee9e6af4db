"""Decision logic of every evaluated method with a scripted chat function (no model, no Dagster)."""

import json

import numpy as np
import polars as pl
import pytest

from dagster_project.core.clarifymt.agent.at_cot import SCHEMA as AT_SCHEMA
from dagster_project.core.clarifymt.agent.at_cot import ATCoT, parse_at_cot
from dagster_project.core.clarifymt.agent.clarify_agent import ClarifyAgent, rule_plan
from dagster_project.core.clarifymt.agent.cot import ChainOfThought, final_decision
from dagster_project.core.clarifymt.agent.intent_sim import (
    IntentSimInterpretations as IntentSim,  # the earlier re-specification; the original: test_eval_baselines.py
)
from dagster_project.core.clarifymt.agent.intent_sim import intent_decision, mean_pairwise_similarity, medoid
from dagster_project.core.clarifymt.agent.majority_vote import TIE_BREAK, MajorityVote, majority_action
from dagster_project.core.clarifymt.agent.method import DialogueTurn, Prediction, predictions_frame
from dagster_project.core.clarifymt.agent.predictions import sample_dialogues
from dagster_project.core.clarifymt.agent.registry import BUILDERS, build_method, calls_per_turn
from dagster_project.core.clarifymt.agent.tracker import Observation, Tracker
from dagster_project.config import EvaluationConfig
from dagster_project.llm.chat import ChatResult

Q = [{"role": "user", "content": "Plan a trip for me."}]
A1 = [*Q, {"role": "assistant", "content": "Where to?"}, {"role": "user", "content": "Somewhere warm."}]


def turn(did="d1", t=1, history=Q):
    return DialogueTurn(did, t, tuple(history))


def props(req):
    """The reply schema's field names; the free-text Output module (the default format) counts as 'text'."""
    return sorted(req.json_schema["properties"]) if req.json_schema else ["text"]


class Chat:
    """Records every batch (and its role); replies with reply(request, sample_index) or an error for error(request)."""

    def __init__(self, reply, error=lambda req: None):
        self.reply, self.error, self.batches, self.roles = reply, error, [], []

    def __call__(self, role, requests):
        self.batches.append(list(requests))
        self.roles.append(role)
        out = []
        for r in requests:
            err = self.error(r)
            texts = [""] * r.sampling.n if err else [self.reply(r, i) for i in range(r.sampling.n)]
            out.append(ChatResult(texts=texts, error=err, model="scripted", tokens_in=7, tokens_out=3))
        return out


# --------------------------------------------------------------------------- majority vote

@pytest.mark.parametrize("actions, expected, votes", [
    (["clarify", "clarify", "answer"], "clarify", (2, 1, 0)),
    (["answer", "answer", "clarify", "invalid", "invalid"], "answer", (1, 2, 2)),
    (["clarify", "answer", "invalid"], TIE_BREAK, (1, 1, 1)),  # a split vote asks
    (["answer", "clarify", "answer", "clarify"], "clarify", (2, 2, 0)),
    (["invalid", "invalid", "invalid"], "invalid", (0, 0, 3)),
])
def test_majority_action_and_tie_break(actions, expected, votes):
    action, counts = majority_action(actions)
    assert action == expected
    assert (counts["clarify"], counts["answer"], counts["abstain"]) == votes


def test_tie_break_is_clarify():
    assert TIE_BREAK == "clarify"


def test_majority_vote_samples_k_at_temperature_and_keeps_winning_text():
    texts = ["The answer is: Rome.", "The clarifying question is: where?", "The clarifying question is: when?",
             "no protocol here", "The answer is: Paris."]
    chat = Chat(lambda r, i: texts[i])
    settings = EvaluationConfig(vote_k=5, vote_temperature=0.7, subject_max_tokens=40)
    [p] = MajorityVote(settings).predict([turn()], chat)
    [req] = chat.batches[0]
    assert req.sampling.n == 5 and req.sampling.temperature == 0.7 and req.sampling.max_tokens == 40
    assert (p.action, p.response, p.status) == ("clarify", "where?", "ok")  # 2 clarify vs 2 answer -> tie -> clarify
    assert p.trace["votes"] == {"clarify": 2, "answer": 2, "abstain": 1} and p.trace["tie"] is True
    assert p.llm_calls == 5 and json.loads(p.raw_output) == texts


def test_majority_vote_all_invalid_and_llm_error():
    [p] = MajorityVote(EvaluationConfig(vote_k=3)).predict([turn()], Chat(lambda r, i: "hmm"))
    assert (p.action, p.status) == ("invalid", "parse_error") and "none of the 3" in p.error
    [e] = MajorityVote(EvaluationConfig(vote_k=3)).predict([turn()], Chat(lambda r, i: "x", lambda r: "boom"))
    assert (e.action, e.status, e.error) == ("invalid", "llm_error", "boom")


# --------------------------------------------------------------------------- CoT

def test_cot_uses_the_last_protocol_line():
    text = ("The answer is not obvious yet.\nThe user only said 'warm'.\n"
            "The clarifying question is:\nWhich country are you thinking of?")
    d, reasoning = final_decision(text)
    assert (d.action, d.text) == ("clarify", "Which country are you thinking of?")
    assert reasoning == "The answer is not obvious yet.\nThe user only said 'warm'."


def test_cot_without_final_protocol_line_is_invalid():
    d, _ = final_decision("Let me think. The user wants a trip")
    assert d.action == "invalid"
    [p] = ChainOfThought(EvaluationConfig()).predict([turn()], Chat(lambda r, i: "thinking... cut off"))
    assert (p.action, p.status, p.error) == ("invalid", "parse_error", "no final line starts with a protocol prefix")


def test_cot_prompt_and_budget():
    chat = Chat(lambda r, i: "Clear.\nThe answer is: go to Lisbon.")
    [p] = ChainOfThought(EvaluationConfig(reasoning_max_tokens=99)).predict([turn(history=A1)], chat)
    [req] = chat.batches[0]
    assert req.sampling.max_tokens == 99 and req.sampling.temperature == 0.0
    assert "step by step" in req.messages[-1]["content"] and req.messages[-1]["content"].startswith("Somewhere warm.")
    assert (p.action, p.response, p.trace["reasoning"]) == ("answer", "go to Lisbon.", "Clear.")


# --------------------------------------------------------------------------- AT-CoT

def test_at_cot_names_the_type_before_deciding():
    assert list(AT_SCHEMA["properties"]) == ["ambiguity_type", "reasoning", "decision", "response"]
    assert "none" in AT_SCHEMA["properties"]["ambiguity_type"]["enum"]
    p, trace = parse_at_cot(json.dumps({"ambiguity_type": "spatial", "reasoning": "no place",
                                        "decision": "clarify", "response": "From where?"}))
    assert (p.action, p.response, p.status, trace["ambiguity_type"]) == ("clarify", "From where?", "ok", "spatial")
    bad, _ = parse_at_cot(json.dumps({"ambiguity_type": "none", "reasoning": "", "decision": "maybe",
                                      "response": "x"}))
    assert (bad.action, bad.status) == ("invalid", "parse_error")


def test_at_cot_system_lists_the_taxonomy():
    chat = Chat(lambda r, i: json.dumps({"ambiguity_type": "none", "reasoning": "", "decision": "answer",
                                         "response": "Here."}))
    [p] = ATCoT(EvaluationConfig(structured_output=True), subtypes=True).predict([turn()], chat)
    system = chat.batches[0][0].messages[0]["content"]
    assert "- lexical:" in system and "- off_focus:" in system and "$taxonomy" not in system
    assert chat.batches[0][0].json_schema == AT_SCHEMA and p.action == "answer"


# --------------------------------------------------------------------------- Intent-Sim

def test_mean_pairwise_similarity_by_hand():
    v = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])  # rows need not be unit length
    # pairs: (1,2) cos 0; (1,3) cos 1/sqrt2; (2,3) cos 1/sqrt2 -> mean sqrt2/3 = 0.4714
    assert mean_pairwise_similarity(v) == pytest.approx(np.sqrt(2) / 3)
    assert medoid(v) == 2
    with pytest.raises(ValueError):
        mean_pairwise_similarity(v[:1])


def test_intent_threshold_strictly_below_tau_asks():
    assert intent_decision(0.4999, 0.5) == "clarify"
    assert intent_decision(0.5, 0.5) == "answer"
    assert intent_decision(0.9, 0.5) == "answer"


def _interp(texts):
    return lambda r, i: json.dumps({"interpretation": texts[i], "clarifying_question": f"q{i}?"})


def _embed(vectors):
    return lambda texts: np.array([vectors[t] for t in texts], dtype=float)


def test_intent_sim_disagreeing_samples_ask_with_the_first_question():
    vecs = {"a": [1, 0], "b": [0, 1], "c": [1, 1]}
    [p] = IntentSim(EvaluationConfig(intent_k=3, intent_tau=0.5, structured_output=True)).predict([turn()], Chat(_interp("abc")), _embed(vecs))
    assert (p.action, p.response) == ("clarify", "q0?")
    assert p.trace["similarity"] == pytest.approx(0.4714, abs=1e-4) and p.llm_calls == 3


def test_intent_sim_agreeing_samples_answer_with_the_medoid():
    vecs = {"a": [1, 0.1], "b": [1, 0], "c": [1, 0.2]}
    [p] = IntentSim(EvaluationConfig(intent_k=3, intent_tau=0.5, structured_output=True)).predict([turn()], Chat(_interp("abc")), _embed(vecs))
    assert (p.action, p.response) == ("answer", "Assuming you mean: a")


def test_intent_sim_needs_two_usable_samples():
    chat = Chat(lambda r, i: "not json" if i else json.dumps({"interpretation": "x", "clarifying_question": "y"}))
    [p] = IntentSim(EvaluationConfig(intent_k=3, structured_output=True)).predict([turn()], chat,
                                                                               _embed({"x": [1, 0]}))
    assert (p.action, p.status) == ("invalid", "parse_error") and "1 of 3" in p.error
    with pytest.raises(ValueError, match="encoder"):
        IntentSim(EvaluationConfig()).predict([turn()], chat)


# --------------------------------------------------------------------------- Tracker FSM

def test_tracker_unfilled_filled_conflict_filled():
    t = Tracker()
    moves = t.update([Observation("Destination", "unfilled")])
    assert (moves[0].before, moves[0].after) == (None, "unfilled") and not t.rsc
    t.update([Observation("destination", "filled", "Kyoto")])
    assert t.slots["destination"].state == "filled" and t.slots["destination"].value == "Kyoto" and t.rsc
    moves = t.update([Observation("DESTINATION", "filled", "Paris")])  # a different value contradicts
    assert (moves[0].before, moves[0].observed, moves[0].after) == ("filled", "filled", "conflict") and not t.rsc
    t.update([Observation("destination", "filled", "Kyoto")])  # a clear value settles it
    assert t.slots["destination"].state == "filled" and t.slots["destination"].value == "Kyoto" and t.rsc


def test_tracker_keeps_filled_slots_and_same_values():
    t = Tracker()
    t.update([Observation("budget", "filled", "800 USD")])
    t.update([Observation("budget", "unfilled")])  # the perceiver forgot: still filled
    assert t.slots["budget"].state == "filled"
    t.update([Observation("budget", "filled", "800 usd!")])  # same value after normalisation
    assert t.slots["budget"].state == "filled"
    t.update([Observation("budget", "conflict", "cheap but fancy")])
    assert t.slots["budget"].state == "conflict"
    t.update([Observation("budget", "unfilled")])
    assert t.slots["budget"].state == "conflict"  # a conflict is only left by a clear value


def test_rsc_needs_required_slots_filled_and_no_conflict_anywhere():
    t = Tracker()
    t.update([Observation("dates", "unfilled", required=False), Observation("city", "filled", "Rome")])
    assert t.rsc  # optional slots may stay open
    t.update([Observation("dates", "conflict", required=False)])
    assert not t.rsc  # but no slot may conflict
    assert t.unresolved() == ["dates"]
    t2 = Tracker()
    t2.update([Observation("a", "unfilled"), Observation("b", "conflict"), Observation("", "filled"),
               Observation("c", "weird")])
    assert t2.unresolved() == ["b", "a"] and set(t2.slots) == {"a", "b"}  # conflicts first; bad input ignored


def test_rule_plan():
    t = Tracker()
    t.update([Observation("city", "unfilled")])
    assert rule_plan(t, "refusal").action == "answer"
    p = rule_plan(t, "precise")
    assert (p.action, p.target_slot, p.decided_by) == ("clarify", "city", "rule")
    t.mark_asked("city")
    t.mark_asked("City")
    assert rule_plan(t, None).action == "answer"  # asked twice already
    t.update([Observation("city", "filled", "Rome")])
    assert rule_plan(t, None).reason.endswith("(RSC)")
    assert rule_plan(None, None).action == "clarify"


# --------------------------------------------------------------------------- ClarifyAgent

def agent_reply(slot_status="unfilled", persona="partial_vague", planner=None):
    def reply(req, i):
        prompt = req.messages[-1]["content"]
        if req.json_schema is None:  # the Output module in free text (the default reply format)
            asks = "clarifying question" in prompt.split("Write the message")[0]
            return "The clarifying question is: Which city?" if asks else "The answer is: Here is a plan."
        props = req.json_schema["properties"]
        if "request" in props:
            return json.dumps({"request": "a trip", "latest": "warm"})
        if "slots" in props:
            status = slot_status(prompt) if callable(slot_status) else slot_status
            return json.dumps({"slots": [{"name": "city", "value": "Rome" if status == "filled" else "",
                                          "status": status, "required": True}]})
        if "persona" in props:
            return json.dumps({"persona": persona, "reason": "r"})
        if "text" in props:  # the Output module in the structured channel: the baselines' decision schema
            asks = "clarifying question" in prompt.split("Give \"action\"")[0]
            return json.dumps({"action": "clarify" if asks else "answer",
                               "text": "Which city?" if asks else "Here is a plan."})
        if "action" in props:
            if planner is not None:
                return planner(prompt)
            return json.dumps({"action": "answer" if "(RSC): yes" in prompt else "clarify",
                               "target_slot": "city", "reason": "r"})
        raise AssertionError(props)
    return reply


def test_agent_carries_tracker_state_across_turns_and_batches_by_turn():
    chat = Chat(agent_reply(lambda prompt: "unfilled" if "(no slots tracked yet)" in prompt else "filled"))
    turns = [turn("d2", 2, A1), turn("d1", 1), turn("d2", 1), turn("d1", 2, A1)]
    preds = ClarifyAgent(EvaluationConfig()).predict(turns, chat)
    by = {(t.dialogue_id, t.turn): p for t, p in zip(turns, preds)}
    assert [by[("d1", 1)].action, by[("d1", 2)].action] == ["clarify", "answer"]
    assert by[("d1", 1)].agent["rsc"] is False and by[("d2", 2)].agent["rsc"] is True
    assert by[("d1", 2)].trace["transitions"] == [{"slot": "city", "before": "unfilled", "observed": "filled",
                                                    "after": "filled"}]
    # turn 1 of both dialogues first: input, perceiver (no forecaster yet), planner, output; then turn 2. The two
    # dialogues send identical requests (same messages, same tracker state): each is sent once and shared
    schemas = [[props(r)[0] for r in b] for b in chat.batches]
    assert schemas == [["latest"], ["slots"], ["action"], ["text"],
                       ["latest"], ["slots", "persona"], ["action"], ["text"]]
    assert [p.llm_calls for p in preds] == [5, 4, 4, 5]
    assert by[("d1", 1)].agent["target_slot"] == "city" and by[("d1", 1)].response == "Which city?"
    assert by[("d1", 2)].agent["persona_forecast"] == "partial_vague"
    assert all(p.prompt_version.startswith("clarify_agent@") for p in preds)


def test_agent_answer_states_remaining_assumptions():
    def planner(prompt):
        return json.dumps({"action": "answer", "target_slot": "", "reason": "user refuses"})

    [p] = ClarifyAgent(EvaluationConfig()).predict([turn()], Chat(agent_reply("unfilled", planner=planner)))
    assert p.action == "answer" and p.agent["assumptions"] == ["city"]
    assert p.response == "Here is a plan. (Assuming nothing specific about: city.)"


def test_agent_planner_parse_failure_falls_back_to_the_rule():
    [p] = ClarifyAgent(EvaluationConfig()).predict([turn()], Chat(agent_reply("unfilled", planner=lambda _: "??")))
    assert (p.action, p.status, p.agent["decided_by"]) == ("clarify", "ok", "rule_fallback")
    assert p.agent["step_errors"] == 1 and "planner" in p.trace["step_errors"]


def test_agent_llm_error_fails_the_turn_and_keeps_the_state():
    fail_first = {"done": False}

    def error(req):
        if "slots" in props(req) and not fail_first["done"]:
            fail_first["done"] = True
            return "timeout"
        return None

    chat = Chat(agent_reply(lambda prompt: "unfilled"), error)
    p1, p2 = ClarifyAgent(EvaluationConfig()).predict([turn("d", 1), turn("d", 2, A1)], chat)
    assert (p1.action, p1.status) == ("invalid", "llm_error") and p1.error == "perceiver: timeout"
    assert p1.llm_calls == 2  # input + the failed perceiver; later steps skipped
    assert p2.status == "ok" and p2.agent["slots"][0]["state"] == "unfilled"


@pytest.mark.parametrize("name, calls_turn2, has", [
    ("clarify_agent_no_planner", 4, {"latest", "slots", "persona", "text"}),
    ("clarify_agent_no_perceiver", 4, {"latest", "persona", "action", "text"}),
    ("clarify_agent_no_forecaster", 4, {"latest", "slots", "action", "text"}),
])
def test_ablations_remove_exactly_one_module(name, calls_turn2, has):
    chat = Chat(agent_reply("unfilled", persona="refusal"))
    method = build_method(name, EvaluationConfig())
    assert method.name == name and isinstance(method, ClarifyAgent) and method.calls_per_turn == 4
    [p] = method.predict([turn("d", 2, A1)], chat)
    assert p.llm_calls == calls_turn2
    assert {props(r)[0] for b in chat.batches for r in b} == has
    if name == "clarify_agent_no_planner":  # the rule answers a refusing user
        assert (p.action, p.agent["decided_by"]) == ("answer", "rule")
    if name == "clarify_agent_no_perceiver":
        assert p.agent.get("rsc") is None and "slot tracking unavailable" in chat.batches[2][0].messages[-1]["content"]
    if name == "clarify_agent_no_forecaster":
        assert p.agent["persona_forecast"] is None


def test_agent_refuses_to_remove_two_modules():
    with pytest.raises(ValueError, match="one module"):
        ClarifyAgent(EvaluationConfig(), planner=False, forecaster=False)


# --------------------------------------------------------------------------- shared interface

def test_registry_and_calls_per_turn():
    s = EvaluationConfig(vote_k=5, intent_k=5)
    assert calls_per_turn(s) == {"base": 1, "majority_vote": 5, "cot": 1, "intent_sim": 7, "at_cot": 1,
                                 "clarify_agent": 5, "clarify_agent_no_planner": 4,
                                 "clarify_agent_no_perceiver": 4, "clarify_agent_no_forecaster": 4,
                                 "intent_sim_interpretations": 5, "at_cot_subtypes": 1}
    assert all(build_method(n, s).name == n for n in BUILDERS)
    with pytest.raises(KeyError, match="unknown method"):
        build_method("magic", s)


@pytest.mark.parametrize("structured", [False, True])
def test_every_method_returns_one_prediction_per_turn_in_order(structured):
    def reply(req, i):
        props = (req.json_schema or {}).get("properties", {})
        system = req.messages[0]["content"]
        if set(props) in ({"action", "text"}, {"reasoning", "action", "text"}):
            return json.dumps({"reasoning": "r", "action": "answer", "text": "fine"})
        if set(props) in ({"question"}, {"reply"}, {"ambiguity_types", "reasoning", "decision", "response"}):
            return json.dumps({"question": "q?", "reply": "same", "ambiguity_types": ["none"], "decision": "answer",
                               "response": "a", "reasoning": ""})
        if not props and "Interpretation" in system:
            return "Interpretation: same\nThe clarifying question is: q?"
        if not props and "best settle" in system:
            return "The clarifying question is: q?"
        if not props and "You play the user" in system:
            return "same"
        if "interpretation" in props:
            return json.dumps({"interpretation": "same", "clarifying_question": "q?"})
        if "ambiguity_type" in props:
            return json.dumps({"ambiguity_type": "none", "reasoning": "", "decision": "answer", "response": "a"})
        if props or "output module" in req.messages[0]["content"]:
            return agent_reply()(req, i)
        return "The answer is: fine."

    turns = [turn("x", 1), turn("y", 1), turn("x", 2, A1)]
    for name in BUILDERS:
        preds = build_method(name, EvaluationConfig(vote_k=2, intent_k=2, structured_output=structured)).predict(
            turns, Chat(reply), lambda texts: np.ones((len(texts), 3)))
        assert len(preds) == 3 and all(p.status == "ok" for p in preds), name
        assert all(p.protocol_ok == 1.0 for p in preds), name
        assert all(p.llm_calls >= 1 for p in preds)
    assert build_method("base", EvaluationConfig()).predict([], Chat(reply)) == []


def test_predictions_frame_schema():
    p = Prediction("clarify", "Which?", "ok", None, "raw", {"k": 1}, 2, 1, 10, 5, 0.5, "m", "v",
                   agent={"slots": [{"name": "a"}], "rsc": False, "assumptions": []})
    df = predictions_frame([p, Prediction()])
    assert df.height == 2 and df.schema["rsc"] == pl.Boolean and df.schema["trace"] == pl.Utf8
    assert json.loads(df["slots"][0]) == [{"name": "a"}] and df["slots"][1] is None
    assert predictions_frame([]).height == 0


def test_sample_dialogues_spreads_over_personas_and_is_deterministic():
    personas = ["precise", "refusal", "off_focus"]
    d = pl.DataFrame({"dialogue_id": [f"q{i}-{p}" for i in range(4) for p in personas],
                      "persona": [p for _ in range(4) for p in personas]})
    picked = sample_dialogues(d, 3, seed=1, persona_order=personas)
    assert len(picked) == 3 and {x.split("-")[1] for x in picked} == set(personas)
    assert picked == sample_dialogues(d, 3, seed=1, persona_order=personas)
    assert len(sample_dialogues(d, 5, seed=1, persona_order=personas)) == 5
    assert sample_dialogues(d, None, 0) == sorted(d["dialogue_id"].to_list())
    assert sample_dialogues(d, 100, 0) == sorted(d["dialogue_id"].to_list())


# --------------------------------------------------------------------------- tasks, roles and schemas

def test_methods_ask_the_subject_role_they_were_built_for():
    chat = Chat(lambda r, i: "The answer is: fine.")
    build_method("base", EvaluationConfig(), role="subject:tiny").predict([turn()], chat)
    assert chat.roles == ["subject:tiny"]


def test_registry_builds_exactly_the_config_method_names():
    from dagster_project.config import METHOD_NAMES

    assert tuple(BUILDERS) == METHOD_NAMES


def test_reply_schemas_are_the_hand_written_ones():
    """The schema is part of the cache key and the llama.cpp grammar: it must not drift from the original dicts."""
    from dagster_project.core.clarifymt.agent.intent_sim import INTENT_SIM
    from dagster_project.core.clarifymt.agent.modules import PERSONA_KEYS, TASKS
    from dagster_project.core.clarifymt.judge import PAIR, SCORE

    s = {"type": "string"}
    old = {
        "input": {"type": "object", "properties": {"request": {**s, "minLength": 3, "maxLength": 240},
                                                   "latest": {**s, "maxLength": 200}}, "required": ["request", "latest"]},
        "perceiver": {"type": "object", "properties": {"slots": {"type": "array", "maxItems": 4, "items": {
            "type": "object",
            "properties": {"name": {**s, "minLength": 1, "maxLength": 40}, "value": {**s, "maxLength": 80},
                           "status": {"type": "string", "enum": ["filled", "unfilled", "conflict"]},
                           "required": {"type": "boolean"}},
            "required": ["name", "value", "status", "required"]}}}, "required": ["slots"]},
        "forecaster": {"type": "object", "properties": {"persona": {"type": "string", "enum": PERSONA_KEYS},
                                                        "reason": {**s, "maxLength": 160}},
                       "required": ["persona", "reason"]},
        "planner": {"type": "object", "properties": {"action": {"type": "string", "enum": ["clarify", "answer"]},
                                                     "target_slot": {**s, "maxLength": 40},
                                                     "reason": {**s, "maxLength": 160}},
                    "required": ["action", "target_slot", "reason"]},
        # the Output module decides with the baselines' decision schema (issue 27.1: one channel for every method)
        "output": {"type": "object", "properties": {"action": {"type": "string", "enum": ["clarify", "answer"]},
                                                    "text": {**s, "minLength": 1, "maxLength": 400}},
                   "required": ["action", "text"]},
    }
    for module, schema in old.items():
        assert TASKS[module].schema == schema, module
        assert list(TASKS[module].schema["properties"]) == list(schema["properties"]), module  # grammar order
    assert INTENT_SIM.schema == {"type": "object", "properties": {
        "interpretation": {**s, "minLength": 3, "maxLength": 200},
        "clarifying_question": {**s, "minLength": 3, "maxLength": 200}},
        "required": ["interpretation", "clarifying_question"]}
    assert SCORE.schema == {"type": "object", "properties": {"score": {"type": "integer", "enum": [0, 1, 2, 3, 4, 5]}},
                            "required": ["score"]}
    assert PAIR.schema == {"type": "object", "properties": {
        "better": {"type": "string", "enum": ["first", "second", "tie"]}}, "required": ["better"]}


def test_fields_the_agent_can_do_without_stay_optional_when_parsing():
    """The schema requires them, but a reply without them was always usable (and still is)."""
    def planner(prompt):
        return json.dumps({"action": "clarify"})

    [p] = ClarifyAgent(EvaluationConfig()).predict([turn()], Chat(agent_reply("unfilled", planner=planner)))
    assert (p.status, p.agent["decided_by"], p.agent["step_errors"]) == ("ok", "planner", 0)
    assert p.trace["plan"]["reason"] == "" and p.agent["target_slot"] is None
    ok, trace = parse_at_cot(json.dumps({"ambiguity_type": "scope", "decision": "answer", "response": "x"}))
    assert (ok.status, trace["reasoning"]) == ("ok", None)


def test_agent_step_errors_keep_their_messages():
    chat = Chat(agent_reply("unfilled", persona="grumpy"))
    [_, p] = ClarifyAgent(EvaluationConfig()).predict([turn("d", 1), turn("d", 2, A1)], chat)
    assert p.trace["step_errors"]["forecaster"].startswith("field 'persona' = 'grumpy' not in [")
    assert p.agent["persona_forecast"] is None
