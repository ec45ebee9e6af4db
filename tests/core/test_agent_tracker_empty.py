"""Issue 14.6: an empty slot table is unknown, not "all slots filled" (the agent asks)."""

import json

from dagster_project.config import EvaluationConfig
from dagster_project.core.clarifymt.agent.clarify_agent import ClarifyAgent, rule_plan
from dagster_project.core.clarifymt.agent.registry import build_method
from dagster_project.core.clarifymt.agent.tracker import Tracker
from tests.core.test_agent_methods import Chat, agent_reply, props, turn


def _no_slots(perceiver_text='{"slots": []}', planner=None):
    """The scripted agent, but the Perceiver reports no slot (or an unusable reply)."""
    inner = agent_reply("unfilled", planner=planner)

    def reply(req, i):
        if "slots" in props(req):
            return perceiver_text
        return inner(req, i)
    return reply


def test_empty_tracker_is_not_rsc_and_the_rule_asks():
    assert Tracker().rsc is False
    plan = rule_plan(Tracker(), None)
    assert (plan.action, plan.decided_by) == ("clarify", "rule")


def test_no_planner_ablation_asks_when_the_perceiver_finds_no_slot():
    [p] = build_method("clarify_agent_no_planner", EvaluationConfig()).predict([turn()], Chat(_no_slots()))
    assert (p.action, p.agent["decided_by"], p.agent["rsc"]) == ("clarify", "rule", False)


def test_parse_failure_fallback_asks_on_an_empty_table():
    chat = Chat(_no_slots("not json", planner=lambda _: "??"))
    [p] = ClarifyAgent(EvaluationConfig()).predict([turn()], chat)
    assert (p.action, p.agent["decided_by"]) == ("clarify", "rule_fallback")
    assert set(p.trace["step_errors"]) == {"perceiver", "planner"}


def test_planner_is_told_rsc_is_unknown_on_an_empty_table():
    seen = []

    def planner(prompt):
        seen.append(prompt)
        return json.dumps({"action": "clarify", "target_slot": "", "reason": "r"})
    ClarifyAgent(EvaluationConfig()).predict([turn()], Chat(_no_slots(planner=planner)))
    assert "(RSC): unknown" in seen[0]
