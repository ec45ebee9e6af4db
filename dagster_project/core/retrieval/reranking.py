"""ClariMM §4.3.2 constrained generative re-rank (Mario) over YAKE keyword IDs: one decoding step per rank
whose JSON schema enumerates exactly the IDs not yet generated, so unknown or repeated IDs cannot be produced.
With a vision-capable reranker the session's images go along as OpenAI-style image parts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import WithJsonSchema, create_model

from dagster_project.llm.chat import ChatRequest
from dagster_project.llm.task import (
    Chat,
    LLMTask,
    NonEmpty,
    Reply,
    Status,
    reply_schema,
)


class NextId(Reply):
    """One decoding step's reply: the keyword ID of the next most relevant document."""

    next: NonEmpty


def _allowed(value: NextId, allowed: Sequence[str]) -> str | None:
    if value.next in set(allowed):
        return None
    return f"generated ID {value.next!r} is not an allowed candidate (the backend did not enforce the schema)"


RERANK_STEP = LLMTask("retrieval_rerank_step", role="reranker", reply=NextId, check=_allowed,
                      sampling={"temperature": 0.0, "max_tokens": 48})


def next_id_reply(allowed: Sequence[str]) -> type[Reply]:
    """NextId whose schema enum is exactly the allowed IDs: the decoding constraint for one rank.

    The llama.cpp backend compiles it to a grammar, vLLM to structured outputs, OpenAI-compatible servers
    enforce it as json_schema: an unknown ID cannot be decoded. Each step's enum holds only the IDs not
    generated yet, so a repeat cannot be decoded either (the trie constraint of Eq. 6 at ID level).
    """
    field = Annotated[NonEmpty, WithJsonSchema({"type": "string", "enum": list(allowed)})]
    return create_model("NextId", __base__=NextId, next=(field, ...))


def next_id_schema(allowed: Sequence[str]) -> dict[str, Any]:
    """The JSON schema one rank's request carries (see next_id_reply)."""
    return reply_schema(next_id_reply(allowed))


def candidate_block(candidates: Sequence[tuple[str, str]]) -> str:
    """Numbered list of '<keyword id>: snippet' lines."""
    return "\n".join(f"- [{kid}] {snippet}" for kid, snippet in candidates)


def rerank_step_request(query: str, conversation: str, candidates: Sequence[tuple[str, str]], chosen: Sequence[str],
                        images: Sequence[dict] | None = None, seed: int = 0) -> ChatRequest:
    """One constrained decoding step: which remaining keyword ID is the next most relevant document."""
    remaining = [kid for kid, _ in candidates if kid not in set(chosen)]
    msgs = RERANK_STEP.template.messages(query=query, conversation=conversation,
                                         candidates=candidate_block(candidates),
                                         chosen=", ".join(f"[{c}]" for c in chosen) or "none yet")
    if images:
        msgs[-1] = {"role": "user", "content": [{"type": "text", "text": msgs[-1]["content"]}, *images]}
    return RERANK_STEP.with_reply(next_id_reply(remaining)).request(msgs, seed=seed)


@dataclass
class GenerativeTask:
    """One query to re-rank: its text, the conversation, candidate (keyword id, snippet) pairs, doc ids, images."""

    query: str
    conversation: str
    candidates: list[tuple[str, str]]
    doc_ids: list[str]
    images: list[dict] | None = None


@dataclass
class GenerativeResult:
    """A re-ranked list with the provenance of the steps that produced it."""

    order: list[str]  # doc ids: the generated ranking, or the first-phase order when generation failed
    generated: int  # ranks the re-ranker decided (0 when it fell back to the first-phase order)
    status: Status
    error: str | None
    raw_outputs: list[str | None]
    model: str
    prompt_version: str
    calls: int = 0

    @property
    def fallback(self) -> bool:
        """True when generation failed and the first-phase order was kept instead."""
        return self.status is not Status.OK


def generative_rerank(tasks: Sequence[GenerativeTask], chat: Chat, seed: int = 0) -> list[GenerativeResult]:
    """Mario's inference as greedy constrained decoding of a FULL ranking of each task's candidates, one batched
    call per rank: step j sends every still-running task one request whose schema allows only its IDs not chosen
    in steps 1..j-1 (temperature 0: greedy; beam search over ID sequences is not offered by the backends' JSON
    constraint). The last rank is the one ID the constraint leaves, so it needs no call. A task whose step fails
    keeps its first-phase order entirely (generated 0, status and error recorded, `fallback`): never a list that
    mixes generated and first-phase ranks.
    """
    chosen: list[list[str]] = [[] for _ in tasks]
    raws: list[list[str | None]] = [[] for _ in tasks]
    status = [Status.OK] * len(tasks)
    errors: list[str | None] = [None] * len(tasks)
    models = [""] * len(tasks)
    calls = [0] * len(tasks)
    version = RERANK_STEP.version if tasks else ""
    while True:
        sent = [(i, rerank_step_request(t.query, t.conversation, t.candidates, chosen[i], t.images, seed))
                for i, t in enumerate(tasks) if status[i] is Status.OK and len(chosen[i]) < len(t.candidates) - 1]
        if not sent:
            break
        results = chat(RERANK_STEP.role, [req for _, req in sent])
        for (i, req), res in zip(sent, results, strict=True):
            [o] = RERANK_STEP.outcomes(req.json_schema["properties"]["next"]["enum"], req, res)
            raws[i].append(o.raw_output)
            calls[i] += 1
            models[i] = o.model or models[i]
            if not o.ok:
                status[i], errors[i] = o.status, o.error
                continue
            chosen[i].append(o.value.next)
    out = []
    for i, t in enumerate(tasks):
        if status[i] is not Status.OK:
            out.append(GenerativeResult(list(t.doc_ids), 0, status[i], errors[i], raws[i], models[i], version, calls[i]))
            continue
        kids = [k for k, _ in t.candidates]
        chosen[i] += [k for k in kids if k not in set(chosen[i])]  # the one ID left (or none)
        by_kid = dict(zip(kids, t.doc_ids))
        order = [by_kid[k] for k in chosen[i]]
        out.append(GenerativeResult(order, len(order), status[i], None, raws[i], models[i], version, calls[i]))
    return out
