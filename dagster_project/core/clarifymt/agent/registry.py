"""Every evaluated method by name (params.yaml: evaluation.methods), built from the `evaluation` config.

The names are config.MethodName's; the registry must build exactly those (checked on import)."""

from __future__ import annotations

from collections.abc import Callable
from typing import get_args

from dagster_project.config import EvaluationConfig, MethodName
from dagster_project.core.clarifymt.agent.at_cot import ATCoT
from dagster_project.core.clarifymt.agent.base import BaseMethod
from dagster_project.core.clarifymt.agent.clarify_agent import ClarifyAgent
from dagster_project.core.clarifymt.agent.cot import ChainOfThought
from dagster_project.core.clarifymt.agent.intent_sim import (
    IntentSim,
    IntentSimInterpretations,
)
from dagster_project.core.clarifymt.agent.majority_vote import MajorityVote
from dagster_project.core.clarifymt.agent.method import Method

Builder = Callable[[EvaluationConfig, str], Method]
BUILDERS: dict[MethodName, Builder] = {
    "base": BaseMethod,
    "majority_vote": MajorityVote,
    "cot": ChainOfThought,
    "intent_sim": IntentSim,
    "at_cot": ATCoT,
    "clarify_agent": ClarifyAgent,
    "clarify_agent_no_planner": lambda cfg, role: ClarifyAgent(cfg, role, planner=False),
    "clarify_agent_no_perceiver": lambda cfg, role: ClarifyAgent(cfg, role, perceiver=False),
    "clarify_agent_no_forecaster": lambda cfg, role: ClarifyAgent(cfg, role, forecaster=False),
    "intent_sim_interpretations": IntentSimInterpretations,
    "at_cot_subtypes": lambda cfg, role: ATCoT(cfg, role, subtypes=True),
}
if tuple(BUILDERS) != get_args(MethodName):
    raise RuntimeError(f"agent.registry builds {list(BUILDERS)}, config.MethodName lists {get_args(MethodName)}")


def build_method(name: str, cfg: EvaluationConfig, role: str = "subject") -> Method:
    """The method called `name`, asking `role` (``subject:<model>`` in the pipeline)."""
    if name not in BUILDERS:
        raise KeyError(f"unknown method {name!r}; known: {sorted(BUILDERS)}")
    method = BUILDERS[name](cfg, role)
    assert method.name == name, (method.name, name)
    return method


def calls_per_turn(cfg: EvaluationConfig) -> dict[str, int]:
    """Upper bound of LLM generations per turn for each method (ClarifyAgent skips the Forecaster on turn 1,
    Intent-Sim its answer call when it asks)."""
    return {name: build_method(name, cfg).calls_per_turn for name in BUILDERS}
