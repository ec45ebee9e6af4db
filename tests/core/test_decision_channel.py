"""Issue 27.1: one decision channel per comparison. With structured_output false every method's final reply, the
agent's Output module included, is free text read by the one protocol parser; with true every final decision is
the JSON decision schema. A model that breaks the channel on one turn costs every method that turn, the same way."""

import numpy as np
import polars as pl
import pytest

from dagster_project.config import EvaluationConfig
from dagster_project.core.clarifymt.agent.clarify_agent import ClarifyAgent
from dagster_project.core.clarifymt.agent.method import predictions_frame
from dagster_project.core.clarifymt.agent.registry import BUILDERS, build_method
from dagster_project.core.clarifymt.metrics import method_comparison
from tests.core.test_agent_methods import Chat, agent_reply, turn
from tests.core.test_eval_format import _any_reply

MARK = "BROKEN-TURN"
GOOD = [{"role": "user", "content": "Plan a trip for me."}]
BAD = [{"role": "user", "content": f"Plan a trip for me. {MARK}"}]


def _breaks(req) -> bool:
    return any(MARK in m["content"] for m in req.messages)


def _broken_reply(req, i):
    """Well-formed replies, except on the marked turn, where every reply breaks the protocol: prose without a
    prefix in free text, a truncated object in JSON."""
    if _breaks(req):
        return '{"action": "clar' if req.json_schema else "Sure! Happy to help with that."
    if "answer it now" in req.messages[0]["content"]:  # Intent-Sim's answer step
        return '{"text": "Rome."}' if req.json_schema else "The answer is: Rome."
    return _any_reply(req, i)


def _embed(texts):
    return np.ones((len(texts), 3))


@pytest.mark.parametrize("structured", [False, True])
def test_a_broken_turn_costs_every_method_the_same(structured):
    cfg = EvaluationConfig(vote_k=2, intent_k=2, structured_output=structured)
    turns = [turn("good", 1, GOOD), turn("bad", 1, BAD)]
    rows = []
    for name in BUILDERS:
        good, bad = build_method(name, cfg).predict(turns, Chat(_broken_reply), _embed)
        assert good.status == "ok" and good.action in ("clarify", "answer"), name
        assert (bad.action, bad.status) == ("invalid", "parse_error"), (name, bad.action, bad.status, bad.error)
        frame = predictions_frame([good, bad]).with_columns(
            method=pl.lit(name), subject=pl.lit("s"), dataset=pl.lit("d"), dialogue_id=pl.Series(["good", "bad"]),
            turn=pl.lit(1), persona=pl.lit("precise"), subtype=pl.lit("goal"), reference_action=pl.lit("clarify"))
        rows.append(frame)
    cmp = method_comparison(pl.concat(rows, how="diagonal_relaxed"), channel="structured" if structured
                            else "free_text", comparison_turn=1).filter(pl.col("scope") == "turn_1")
    # the broken turn is counted wrong for every method: no method reaches more than 1 of 2
    assert cmp.height == len(BUILDERS) and (cmp["invalid"] == 0.5).all() and (cmp["accuracy"] <= 0.5).all()
    assert set(cmp["decision_channel"]) == {"structured" if structured else "free_text"}


@pytest.mark.parametrize("structured", [False, True])
def test_the_agents_decision_is_its_output_reply_in_the_runs_channel(structured):
    inner = agent_reply("unfilled")

    def reply(req, i):  # every internal module well-formed; only the final reply breaks the channel
        is_output = req.json_schema is None or set(req.json_schema["properties"]) == {"action", "text"}
        if is_output:
            return '{"text": "Which city?"}' if structured else "Which city are you going to?"
        return inner(req, i)

    [p] = ClarifyAgent(EvaluationConfig(structured_output=structured)).predict([turn()], Chat(reply))
    assert (p.action, p.status) == ("invalid", "parse_error") and "output" in p.trace["step_errors"]
    assert p.trace["plan"]["action"] == "clarify"  # the plan alone no longer decides


def test_an_output_that_decides_otherwise_than_the_plan_stands_and_is_recorded():
    inner = agent_reply("unfilled")

    def reply(req, i):
        if req.json_schema is None:
            return "The answer is: Rome is nice."
        return inner(req, i)

    [p] = ClarifyAgent(EvaluationConfig()).predict([turn()], Chat(reply))
    assert (p.action, p.status, p.response) == ("answer", "ok", "Rome is nice.")
    assert p.trace["output_vs_plan"] == "reply: answer, plan: clarify" and "output" not in p.trace.get(
        "step_errors", {})

