"""Every evaluated method by name (params.yaml: evaluation.methods), built from one MethodSettings."""

from __future__ import annotations

from collections.abc import Callable

from dagster_project.core.clarifymt.agent.at_cot import ATCoT
from dagster_project.core.clarifymt.agent.base import BaseMethod
from dagster_project.core.clarifymt.agent.clarify_agent import ClarifyAgent
from dagster_project.core.clarifymt.agent.cot import ChainOfThought
from dagster_project.core.clarifymt.agent.intent_sim import IntentSim
from dagster_project.core.clarifymt.agent.majority_vote import MajorityVote
from dagster_project.core.clarifymt.agent.method import Method, MethodSettings

BUILDERS: dict[str, Callable[[MethodSettings], Method]] = {
    "base": BaseMethod,
    "majority_vote": MajorityVote,
    "cot": ChainOfThought,
    "intent_sim": IntentSim,
    "at_cot": ATCoT,
    "clarify_agent": ClarifyAgent,
    "clarify_agent_no_planner": lambda s: ClarifyAgent(s, planner=False),
    "clarify_agent_no_perceiver": lambda s: ClarifyAgent(s, perceiver=False),
    "clarify_agent_no_forecaster": lambda s: ClarifyAgent(s, forecaster=False),
}
BASELINES = ("base", "majority_vote", "cot", "intent_sim", "at_cot")
ABLATIONS = ("clarify_agent_no_planner", "clarify_agent_no_perceiver", "clarify_agent_no_forecaster")


def build_method(name: str, settings: MethodSettings) -> Method:
    if name not in BUILDERS:
        raise KeyError(f"unknown method {name!r}; known: {sorted(BUILDERS)}")
    method = BUILDERS[name](settings)
    assert method.name == name, (method.name, name)
    return method


def calls_per_turn(settings: MethodSettings) -> dict[str, int]:
    """Upper bound of LLM generations per turn for each method (ClarifyAgent skips the Forecaster on turn 1)."""
    return {name: build_method(name, settings).calls_per_turn for name in BUILDERS}
