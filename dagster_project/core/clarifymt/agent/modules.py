"""ClarifyAgent's five LLM modules as tasks (Input, Perceiver, Forecaster, Planner, Output): one reply model each.

The four internal modules reply with constrained JSON. Validation keeps the agent's tolerance: a field the agent
can do without (Input.latest, a Planner's target_slot or reason, the Forecaster's reason) is required by the
schema but not by the parser, and a Perceiver slot item that is unusable is skipped, not fatal. The Output module
gives the agent's final decision through the run's decision channel, exactly as the baselines do: free text
opening with the response-prefix protocol (OUTPUT_TEXT), or the baselines' JSON decision {action, text} (OUTPUT).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ValidationError, WithJsonSchema

from dagster_project.core.clarifymt.agent.method import DecisionReply, check_action, json_string, schema_required
from dagster_project.core.clarifymt.agent.tracker import Observation
from dagster_project.core.shared.taxonomy import PERSONAS
from dagster_project.llm.prompts import ReplyFormat
from dagster_project.llm.task import LLMTask, NonEmpty, Reply

MODULES = ("input", "perceiver", "forecaster", "planner", "output")
PERSONA_KEYS = [p.key for p in PERSONAS]
ACTIONS = ["clarify", "answer"]
SLOT_ITEM = {
    "type": "object",
    "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 40},
                   "value": {"type": "string", "maxLength": 80},
                   "status": {"type": "string", "enum": ["filled", "unfilled", "conflict"]},
                   "required": {"type": "boolean"}},
    "required": ["name", "value", "status", "required"],
}


class InputReply(Reply):
    """The dialogue normalised: the request as a whole and the user's latest message."""

    model_config = schema_required("request", "latest")

    request: Annotated[NonEmpty, json_string(minLength=3, maxLength=240)]
    latest: Annotated[Any, json_string(maxLength=200)] = ""


class PerceiverReply(Reply):
    """Up to four slots with their status; the items are checked one by one (see `observations`)."""

    model_config = schema_required("slots")

    slots: Annotated[Any, WithJsonSchema({"type": "array", "maxItems": 4, "items": SLOT_ITEM})] = None


class ObservedSlot(Reply):
    """One Perceiver slot item as the agent uses it: a name and a status at least."""

    name: NonEmpty
    status: NonEmpty
    value: Any = None
    required: Any = True


class ForecasterReply(Reply):
    """The persona the user's last reply shows."""

    model_config = schema_required("persona", "reason")

    persona: Annotated[NonEmpty, json_string(enum=PERSONA_KEYS)]
    reason: Annotated[Any, json_string(maxLength=160)] = ""


class PlannerReply(Reply):
    """Ask or answer, about which slot, and why."""

    model_config = schema_required("action", "target_slot", "reason")

    action: Annotated[NonEmpty, json_string(enum=ACTIONS)]
    target_slot: Annotated[Any, json_string(maxLength=40)] = ""
    reason: Annotated[Any, json_string(maxLength=160)] = ""


def _slots_list(value: PerceiverReply, _: Any) -> str | None:
    return None if isinstance(value.slots, list) else "field 'slots' should be a list"


def _persona(value: ForecasterReply, _: Any) -> str | None:
    return None if value.persona in PERSONA_KEYS else f"field 'persona' = {value.persona!r} not in {PERSONA_KEYS}"


def _action(value: PlannerReply, _: Any) -> str | None:
    return None if value.action in ACTIONS else f"action {value.action!r} is not clarify/answer"


def _module(name: str, reply: type[Reply], check: Any = None, fmt: ReplyFormat | None = None) -> LLMTask[Any]:
    return LLMTask(f"agent_{name}", fmt=fmt, role="subject", reply=reply, check=check, sampling={"temperature": 0.0})


INPUT = _module("input", InputReply)
PERCEIVER = _module("perceiver", PerceiverReply, _slots_list)
FORECASTER = _module("forecaster", ForecasterReply, _persona)
PLANNER = _module("planner", PlannerReply, _action)
OUTPUT = _module("output", DecisionReply, check_action, "json")  # the same decision schema as every baseline
OUTPUT_TEXT = LLMTask("agent_output", fmt="text", role="subject", sampling={"temperature": 0.0},
                      accept_truncated=True)  # free text (prefix protocol)
TASKS: dict[str, LLMTask[Any]] = {"input": INPUT, "perceiver": PERCEIVER, "forecaster": FORECASTER,
                                  "planner": PLANNER, "output": OUTPUT}


def observations(reply: PerceiverReply) -> list[Observation]:
    """The usable slot items of a Perceiver reply (an item without a name or status is skipped)."""
    obs = []
    for item in reply.slots:
        try:
            slot = ObservedSlot.model_validate(item)
        except ValidationError:
            continue
        value = slot.value if isinstance(slot.value, str) else None
        obs.append(Observation(slot.name, slot.status, (value or "").strip() or None, bool(slot.required)))
    return obs


def text_or_empty(value: Any) -> str:
    """A tolerated free-text field: stripped when it is a string, "" otherwise."""
    return value.strip() if isinstance(value, str) else ""
