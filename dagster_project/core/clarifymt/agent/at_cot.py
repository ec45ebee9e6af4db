"""AT-CoT (ambiguity-type chain of thought): name the ambiguity types first, then reason, then ask or answer.

`at_cot` is the original method (Tang, Soulier & Guigue, SIGIR 2025): its action-based taxonomy of three
types (semantic, generalize, specify), any number of which may apply, and reasoning about how to clarify
them, adapted to ask-or-answer as ClarifyMT-Bench §6 does ("none" lets it answer, and the reply ends in the
decision). `at_cot_subtypes` is this project's earlier re-specification: one of ClarifyMT-Bench's 16 subtypes.

With evaluation.structured_output the reply is constrained JSON, fields in that order; otherwise (the paper's
free text) a first line "Ambiguity type(s): ...", brief reasoning, and a final line in the response-prefix
protocol. Either way the types come before the decision; a reply without a usable decision -> `invalid`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from string import Template
from typing import Annotated, Any

from pydantic import Field, WithJsonSchema

from dagster_project.config import EvaluationConfig
from dagster_project.core.clarifymt.agent.base import base_messages
from dagster_project.core.clarifymt.agent.cot import final_decision
from dagster_project.core.clarifymt.agent.method import (
    DialogueTurn,
    Prediction,
    SubjectMethod,
    answered,
    ask,
    decision_prediction,
    json_string,
    schema_required,
)
from dagster_project.core.shared.dedup import Embed
from dagster_project.core.shared.taxonomy import SUBTYPES
from dagster_project.llm.chat import Message
from dagster_project.llm.task import Chat, LLMTask, NonEmpty, Reply, Status

METHOD = "at_cot"
SUBTYPES_METHOD = "at_cot_subtypes"
TYPES = [s.key for s in SUBTYPES] + ["none"]
ACTION_TYPES = {  # the original paper's action-based taxonomy, in this project's words
    "semantic": "a word or entity mention in the request has several meanings or referents",
    "generalize": "the request is narrowly focused; a broader, closely related request may serve the user better",
    "specify": "the request has a clear focus but too wide a scope; more specific details would narrow it",
}
ACTION_KEYS = [*ACTION_TYPES, "none"]


def _decision(value: Any, _: Any) -> str | None:
    return None if value.decision in ("clarify", "answer") else f"decision {value.decision!r} is not clarify/answer"


class ATCoTReply(Reply):
    """Type first, then reasoning, then the decision and its text (reasoning is not checked)."""

    model_config = schema_required("ambiguity_type", "reasoning", "decision", "response")

    ambiguity_type: Annotated[NonEmpty, json_string(enum=TYPES)]
    reasoning: Annotated[Any, json_string(maxLength=240)] = None
    decision: Annotated[NonEmpty, json_string(enum=["clarify", "answer"])]
    response: NonEmpty = Field(json_schema_extra={"minLength": 1, "maxLength": 240})


class ATCoTActionsReply(Reply):
    """The original taxonomy: every type that applies (or none), how to clarify, then the decision and text."""

    model_config = schema_required("ambiguity_types", "reasoning", "decision", "response")

    ambiguity_types: Annotated[list[str], WithJsonSchema({"type": "array", "minItems": 1, "maxItems": 3,
                                                          "items": {"type": "string", "enum": ACTION_KEYS}})]
    reasoning: Annotated[Any, json_string(maxLength=300)] = None
    decision: Annotated[NonEmpty, json_string(enum=["clarify", "answer"])]
    response: NonEmpty = Field(json_schema_extra={"minLength": 1, "maxLength": 240})


def _sampling() -> dict[str, float]:
    return {"temperature": 0.0}


AT_COT = LLMTask("evaluate_at_cot", fmt="json", role="subject", reply=ATCoTReply, check=_decision, sampling=_sampling())
SCHEMA = AT_COT.schema
# free-text steps decide on their protocol line: a reply cut off at max_tokens still counts (llm/task.py)
AT_COT_TEXT = LLMTask("evaluate_at_cot", fmt="text", role="subject", sampling=_sampling(), accept_truncated=True)
AT_COT_ACTIONS = LLMTask("evaluate_at_cot_actions", fmt="text", role="subject", sampling=_sampling(),
                         accept_truncated=True)
AT_COT_ACTIONS_JSON = LLMTask("evaluate_at_cot_actions", fmt="json", role="subject", reply=ATCoTActionsReply,
                              check=_decision, sampling=_sampling())
_TYPE_LINE = re.compile(r"^[\W_]*ambiguity\s+types?\s*[:=-]\s*(.+)$", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class Taxonomy:
    """What one AT-CoT variant names before deciding, and its prompts (free text, JSON)."""

    keys: tuple[str, ...]
    lines: str
    multiple: bool
    text: LLMTask
    json: LLMTask


SUBTYPE_TAXONOMY = Taxonomy(tuple(TYPES), "\n".join(f"- {s.key}: {s.definition}" for s in SUBTYPES), False,
                            AT_COT_TEXT, AT_COT)
ACTION_TAXONOMY = Taxonomy(tuple(ACTION_KEYS), "\n".join(f"- {k}: {d}" for k, d in ACTION_TYPES.items()), True,
                           AT_COT_ACTIONS, AT_COT_ACTIONS_JSON)


def taxonomy_lines() -> str:
    """One '- key: definition' line per subtype (the $taxonomy of the subtypes variant's system prompt)."""
    return SUBTYPE_TAXONOMY.lines


def at_cot_messages(history: Sequence[Message], task: LLMTask = AT_COT, lines: str | None = None) -> list[Message]:
    """The base layout with the AT-CoT system prompt, its taxonomy filled in."""
    msgs = base_messages(history, task)
    system = Template(task.template.system).substitute(taxonomy=lines or taxonomy_lines()).strip()
    return [{"role": "system", "content": system}, *msgs[1:]]


def parse_at_cot(text: str, task: LLMTask = AT_COT) -> tuple[Prediction, dict[str, Any]]:
    """(prediction, trace {ambiguity_type(s), reasoning}) of one JSON reply; an unusable reply is a parse_error."""
    parsed = task.parse(text)
    if parsed.value is None:
        return Prediction("invalid", None, Status.PARSE_ERROR.value, parsed.error, text, protocol_ok=0.0), {}
    v = parsed.value
    named = {"ambiguity_types": v.ambiguity_types} if task.reply is ATCoTActionsReply else {
        "ambiguity_type": v.ambiguity_type}
    return Prediction(v.decision, v.response.strip(), Status.OK.value, None, text, protocol_ok=1.0), {
        **named, "reasoning": v.reasoning}


def parse_at_cot_text(text: str, taxonomy: Taxonomy = SUBTYPE_TAXONOMY) -> tuple[Prediction, dict[str, Any]]:
    """(prediction, trace) of a free-text reply: the known types on the type line (None / [] when missing), the
    reasoning, and the last protocol line's decision; no protocol line -> parse_error."""
    decision, reasoning = final_decision(text)
    m = _TYPE_LINE.search(text or "")
    words = ["_".join(w.lower().split()) for w in re.split(r",|;|/|\band\b", m.group(1))] if m else []
    found = [w.strip("_*.`'\" ") for w in words]
    known = [w for w in found if w in taxonomy.keys]
    named = {"ambiguity_types": known} if taxonomy.multiple else {"ambiguity_type": known[0] if known else None}
    trace = {**named, "reasoning": _TYPE_LINE.sub("", reasoning).strip()}
    p = decision_prediction(decision, text)
    if decision.action == "invalid":
        p.error = "no final line starts with a protocol prefix"
    return p, trace


class ATCoT(SubjectMethod):
    """Name the ambiguity types that remain, reason, then ask or answer (one greedy reply per turn)."""

    def __init__(self, cfg: EvaluationConfig, role: str = "subject", subtypes: bool = False):
        super().__init__(cfg, role)
        self.name = SUBTYPES_METHOD if subtypes else METHOD
        self.taxonomy = SUBTYPE_TAXONOMY if subtypes else ACTION_TAXONOMY

    def predict(self, turns: Sequence[DialogueTurn], chat: Chat, embed: Embed | None = None) -> list[Prediction]:
        structured, tx = self.cfg.structured_output, self.taxonomy
        task = tx.json if structured else tx.text
        answers = ask(chat, self.role, [(t, task, at_cot_messages(t.history, task, tx.lines)) for t in turns],
                      max_tokens=self.cfg.reasoning_max_tokens)

        def read(a: Any) -> Prediction:
            p, trace = parse_at_cot(a.result.text, task) if structured else parse_at_cot_text(a.result.text, tx)
            p.trace = trace
            return p
        return [answered(a, read) for a in answers]
