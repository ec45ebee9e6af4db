"""AT-CoT (ambiguity-type chain of thought), adapted to multi-turn ask-or-answer.

The model first names the ambiguity type that remains after the whole dialogue (one of the 16
ClarifyMT-Bench subtypes, or "none"), then reasons briefly, then decides and writes the question or
the answer. With evaluation.structured_output the reply is constrained JSON, fields in that order;
otherwise (the paper's free text) a first line "Ambiguity type: <type>", brief reasoning, and a final
line in the response-prefix protocol. Either way the type comes before the decision, as in the original
method; a reply without a usable decision -> `invalid` (parse_error).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from string import Template
from typing import Annotated, Any

from pydantic import Field

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
TYPES = [s.key for s in SUBTYPES] + ["none"]


def _decision(value: Any, _: Any) -> str | None:
    return None if value.decision in ("clarify", "answer") else f"decision {value.decision!r} is not clarify/answer"


class ATCoTReply(Reply):
    """Type first, then reasoning, then the decision and its text (reasoning is not checked)."""

    model_config = schema_required("ambiguity_type", "reasoning", "decision", "response")

    ambiguity_type: Annotated[NonEmpty, json_string(enum=TYPES)]
    reasoning: Annotated[Any, json_string(maxLength=240)] = None
    decision: Annotated[NonEmpty, json_string(enum=["clarify", "answer"])]
    response: NonEmpty = Field(json_schema_extra={"minLength": 1, "maxLength": 240})


AT_COT = LLMTask("evaluate_at_cot", role="subject", reply=ATCoTReply, check=_decision,
                 sampling={"temperature": 0.0})
SCHEMA = AT_COT.schema
AT_COT_TEXT = LLMTask("evaluate_at_cot_text", role="subject", sampling={"temperature": 0.0})
_TYPE_LINE = re.compile(r"^[\W_]*ambiguity\s+type\s*[:=-]\s*[\W_]*([a-z_ ]+)", re.IGNORECASE | re.MULTILINE)


def taxonomy_lines() -> str:
    """One '- key: definition' line per subtype (the $taxonomy of the system prompt)."""
    return "\n".join(f"- {s.key}: {s.definition}" for s in SUBTYPES)


def at_cot_messages(history: Sequence[Message], task: LLMTask = AT_COT) -> list[Message]:
    """The base layout with the AT-CoT system prompt, its taxonomy filled in."""
    msgs = base_messages(history, task)
    system = Template(task.template.system).substitute(taxonomy=taxonomy_lines()).strip()
    return [{"role": "system", "content": system}, *msgs[1:]]


def parse_at_cot(text: str) -> tuple[Prediction, dict[str, Any]]:
    """(prediction, trace {ambiguity_type, reasoning}) of one reply; an unusable reply is a parse_error."""
    parsed = AT_COT.parse(text)
    if parsed.value is None:
        return Prediction("invalid", None, Status.PARSE_ERROR.value, parsed.error, text, protocol_ok=0.0), {}
    v = parsed.value
    trace = {"ambiguity_type": v.ambiguity_type, "reasoning": v.reasoning}
    return Prediction(v.decision, v.response.strip(), Status.OK.value, None, text, protocol_ok=1.0), trace


def parse_at_cot_text(text: str) -> tuple[Prediction, dict[str, Any]]:
    """(prediction, trace) of a free-text reply: the type line (None when missing or unknown), the reasoning,
    and the last protocol line's decision; no protocol line -> parse_error."""
    decision, reasoning = final_decision(text)
    m = _TYPE_LINE.search(text or "")
    name = "_".join(m.group(1).lower().split()) if m else None
    trace = {"ambiguity_type": name if name in TYPES else None, "reasoning": _TYPE_LINE.sub("", reasoning).strip()}
    p = decision_prediction(decision, text)
    if decision.action == "invalid":
        p.error = "no final line starts with a protocol prefix"
    return p, trace


class ATCoT(SubjectMethod):
    """Name the remaining ambiguity type, then ask or answer (one greedy JSON reply per turn)."""

    name = METHOD

    def predict(self, turns: Sequence[DialogueTurn], chat: Chat, embed: Embed | None = None) -> list[Prediction]:
        task = AT_COT if self.cfg.structured_output else AT_COT_TEXT
        answers = ask(chat, self.role, [(t, task, at_cot_messages(t.history, task)) for t in turns],
                      max_tokens=self.cfg.reasoning_max_tokens)
        read = parse_at_cot if self.cfg.structured_output else parse_at_cot_text
        return [answered(a, lambda x: _traced(*read(x.result.text))) for a in answers]


def _traced(p: Prediction, trace: dict[str, Any]) -> Prediction:
    p.trace = trace
    return p
