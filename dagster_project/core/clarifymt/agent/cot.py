"""Zero-shot chain of thought: reason step by step, then a final line in the response-prefix protocol.

The reply is free text (as for the base prompt). Its decision is the **last** line that opens with
"The answer is" / "The clarifying question is" (case- and whitespace-tolerant, as parse_decision);
a reply without such a line (e.g. cut off by the token limit) is `invalid`, counted as wrong.
With evaluation.structured_output the reply is JSON {reasoning, action, text} (reasoning first).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from dagster_project.core.clarifymt.agent.base import base_messages
from dagster_project.core.clarifymt.agent.method import (
    DialogueTurn,
    Prediction,
    SubjectMethod,
    answered,
    ask,
    check_action,
    decision_of,
    decision_prediction,
    json_string,
    schema_required,
)
from dagster_project.core.shared.dedup import Embed
from dagster_project.llm.protocol import Decision, parse_decision
from dagster_project.llm.task import Answer, Chat, LLMTask, NonEmpty, Reply

METHOD = "cot"
# the last protocol line decides; a reply cut off after it still counts (llm/task.py)
COT = LLMTask("evaluate_cot", fmt="text", role="subject", sampling={"temperature": 0.0}, accept_truncated=True)


class CoTReply(Reply):
    """Reasoning first, then the decision and its text (reasoning is not checked)."""

    model_config = schema_required("reasoning", "action", "text")

    reasoning: Annotated[Any, json_string(maxLength=600)] = None
    action: Annotated[NonEmpty, json_string(enum=["clarify", "answer"])]
    text: Annotated[NonEmpty, json_string(minLength=1, maxLength=400)]


COT_JSON = LLMTask("evaluate_cot", fmt="json", role="subject", reply=CoTReply, check=check_action,
                   sampling={"temperature": 0.0})


def final_decision(text: str | None) -> tuple[Decision, str]:
    """(decision of the last protocol line, reasoning before it); invalid when no line follows the protocol."""
    lines = (text or "").splitlines()
    for i in range(len(lines) - 1, -1, -1):
        d = parse_decision(lines[i])
        if d.action != "invalid":
            rest = " ".join(x.strip() for x in lines[i + 1:] if x.strip())
            full = Decision(d.action, " ".join(x for x in (d.text, rest) if x))
            return full, "\n".join(lines[:i]).strip()
    return Decision("invalid", (text or "").strip()), (text or "").strip()


class ChainOfThought(SubjectMethod):
    """Greedy step-by-step reasoning; the last protocol line decides."""

    name = METHOD

    def predict(self, turns: Sequence[DialogueTurn], chat: Chat, embed: Embed | None = None) -> list[Prediction]:
        task = COT_JSON if self.cfg.structured_output else COT
        answers = ask(chat, self.role, [(t, task, base_messages(t.history, task)) for t in turns],
                      max_tokens=self.cfg.reasoning_max_tokens)
        return [answered(a, _read_json if self.cfg.structured_output else _read) for a in answers]


def _read_json(answer: Answer) -> Prediction:
    p = decision_prediction(decision_of(answer.first), answer.result.text, answer.first.error)
    value = answer.first.value
    p.trace = {"reasoning": value.reasoning if value is not None and isinstance(value.reasoning, str) else None}
    return p


def _read(answer: Answer) -> Prediction:
    decision, reasoning = final_decision(answer.first.value)
    p = decision_prediction(decision, answer.first.value)
    if decision.action == "invalid":
        p.error = "no final line starts with a protocol prefix"
    p.trace = {"reasoning": reasoning}
    return p
