"""One call per distinct prompt: sessions share QA pairs and first turns, so many items render to the same
request. Each distinct request is sent once (in first-seen order) and every item gets that request's outcome."""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence

from dagster_project.llm.chat import ChatRequest, canonical_json
from dagster_project.llm.task import Chat, LLMTask, Outcome


@dataclasses.dataclass(frozen=True)
class Ask:
    """One item to ask about: the task that parses the reply and the request it renders to."""

    item: Hashable
    task: LLMTask
    request: ChatRequest


def request_key(req: ChatRequest) -> str:
    """Identity of a request within one batch (messages, schema, sampling, template version)."""
    return canonical_json([list(req.messages), req.json_schema, req.sampling.__dict__, req.prompt_version])


def ask_once(chat: Chat, role: str, asks: Sequence[Ask]) -> dict[Hashable, Outcome]:
    """item -> its (first-sample) outcome, sending each distinct request once in one batch to `role`."""
    distinct: dict[str, Ask] = {}
    for ask in asks:
        distinct.setdefault(request_key(ask.request), ask)
    results = chat(role, [a.request for a in distinct.values()]) if distinct else []
    answers = {key: (a, res) for (key, a), res in zip(distinct.items(), results, strict=True)}
    out: dict[Hashable, Outcome] = {}
    for ask in asks:
        first, res = answers[request_key(ask.request)]
        out[ask.item] = ask.task.outcomes(ask.item, first.request, res)[0]
    return out
