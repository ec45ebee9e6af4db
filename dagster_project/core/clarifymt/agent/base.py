"""The paper's plain evaluation prompt (Fig. 7c): the reply must open with the response-prefix protocol.

With evaluation.structured_output the same prompt asks for JSON {action, text} instead (DecisionReply),
as every other method then does: the two formats never mix within one comparison."""

from __future__ import annotations

from collections.abc import Sequence
from string import Template

import polars as pl

from dagster_project.core.clarifymt.agent.method import (
    DecisionReply,
    DialogueTurn,
    Prediction,
    SubjectMethod,
    ask,
    check_action,
    protocol_prediction,
)
from dagster_project.core.shared.dedup import Embed
from dagster_project.llm.chat import ChatRequest, ChatResult, Message
from dagster_project.llm.protocol import parse_decision
from dagster_project.llm.task import Chat, LLMTask, Status

METHOD = "base"
# the protocol decides on the opening words, so a reply cut off at max_tokens still counts (llm/task.py)
BASE = LLMTask("evaluate_base", fmt="text", role="subject", sampling={"temperature": 0.0}, accept_truncated=True)
BASE_JSON = LLMTask("evaluate_base", fmt="json", role="subject", reply=DecisionReply, check=check_action,
                    sampling={"temperature": 0.0})


def base_task(structured: bool) -> LLMTask:
    """The plain prompt in the run's reply format (evaluation.structured_output)."""
    return BASE_JSON if structured else BASE


def base_messages(history: Sequence[Message], task: LLMTask = BASE) -> list[Message]:
    """System instruction + the dialogue so far; the latest user message carries the protocol reminder.

    Other single-prompt methods (CoT, AT-CoT, Intent-Sim) reuse this layout with their own task's template,
    whose user part wraps the latest message as ``$message``.
    """
    prompt = task.template
    *earlier, last = history
    last_user = Template(prompt.user).substitute(message=last["content"]).strip()
    return [{"role": "system", "content": prompt.system.strip()}, *earlier, {"role": "user", "content": last_user}]


def base_requests(histories: list[list[Message]], max_tokens: int) -> list[ChatRequest]:
    """One greedy base-prompt request per dialogue history."""
    return [BASE.request(base_messages(h), max_tokens=max_tokens) for h in histories]


def parse_predictions(results: list[ChatResult]) -> pl.DataFrame:
    """action (clarify / answer / invalid), response text, status: invalid replies are parse_error rows."""
    rows = []
    for res in results:
        d = parse_decision(res.text) if not res.error else None
        status = Status.LLM_ERROR if d is None else (Status.PARSE_ERROR if d.action == "invalid" else Status.OK)
        rows.append({
            "action": d.action if d else "invalid",
            "response": d.text if d else None,
            "status": status.value,
            "error": res.error or ("reply does not start with a protocol prefix" if status is Status.PARSE_ERROR
                                   else None),
            "raw_output": res.text, "model": res.model, "latency_s": res.latency_s, "cached": res.cached,
            "tokens_in": res.tokens_in, "tokens_out": res.tokens_out,
        })
    return pl.DataFrame(rows, schema_overrides={"response": pl.Utf8, "error": pl.Utf8, "raw_output": pl.Utf8})


class BaseMethod(SubjectMethod):
    """The plain prompt (greedy): one call per turn, the reply parsed with the response-prefix protocol."""

    name = METHOD

    def predict(self, turns: Sequence[DialogueTurn], chat: Chat, embed: Embed | None = None) -> list[Prediction]:
        task = base_task(self.cfg.structured_output)
        jobs = [(t, task, base_messages(t.history, task)) for t in turns]
        return [protocol_prediction(a) for a in ask(chat, self.role, jobs, max_tokens=self.cfg.subject_max_tokens)]
