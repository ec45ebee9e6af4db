"""The assistant being trained / evaluated: its prompt (catalogue + few-shot demos), and reading its replies (an
intent name, a clarifying question, or "out of domain"; JSON in structured mode, the paper's plain text otherwise)."""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any

from pydantic import RootModel, WithJsonSchema

from dagster_project.core.intents.catalog import OOD_TARGET, Catalog, known_intent, name_key, string_enum
from dagster_project.io.formats.intents import problem_reason
from dagster_project.io.records import Record
from dagster_project.llm.chat import ChatRequest, Message
from dagster_project.llm.task import LLMTask, Reply, reply_schema, text_field

ACTIONS = ("intent", "clarify", "out_of_domain", "invalid")


@dataclass(frozen=True)
class AssistantReply:
    action: str  # intent | clarify | out_of_domain | invalid
    text: str  # canonical: the intent name, the question, "out of domain", or the raw reply when invalid
    intent: str | None = None
    error: str | None = None
    repaired: bool = dataclasses.field(default=False, compare=False)  # its JSON needed lenient recovery


class JsonObject(RootModel[dict[str, Any]]):
    """Any JSON object: a JSON assistant reply is read key by key (`_assistant_json`), never refused whole."""


def _usable(text: str, item: Any) -> str | None:
    """LLMTask check: why the assistant's reply is unusable for this conversation (None when usable)."""
    return parse_assistant_reply(text, list(item.candidates)).error


# Free-text steps: a reply is read by parse_assistant_reply whatever its form (JSON or plain text); in structured
# mode the request carries `assistant_schema` for the grammar. JSON_READER only reads JSON replies (leniently).
ASSISTANT = LLMTask("intents_assistant", fmt="text", role="assistant", check=_usable)
ASSISTANT_JSON = LLMTask("intents_assistant", fmt="json", role="assistant", check=_usable)
JSON_READER = LLMTask("intents_assistant", fmt="json", role="assistant", reply=JsonObject, lenient=True)


def assistant_task(structured: bool) -> LLMTask:
    """The assistant step in structured (JSON) or plain-text mode."""
    return ASSISTANT_JSON if structured else ASSISTANT


@cache
def assistant_schema(candidates: tuple[str, ...]) -> dict[str, Any]:
    """The grammar of a structured reply: an action, one of this conversation's candidates (or none), a question."""

    class AssistantJSON(Reply):
        action: Annotated[str, WithJsonSchema(string_enum(["predict_intent", "ask_clarifying_question",
                                                           "out_of_domain"]))]
        intent: Annotated[str, WithJsonSchema(string_enum([*candidates, "none"]))]
        question: str = text_field(120)

    return reply_schema(AssistantJSON)


_LEAD_RE = re.compile(r"^[\s\"'*_`>#]*(?:assistant\s*:\s*)?(?:intent\s*:\s*)?[\s\"'*_`]*", re.IGNORECASE)
_OOD_KEYS = {"out of domain", "ood", "out of scope"}


def _assistant_json(obj: dict, candidates: list[str], repaired: bool) -> AssistantReply:
    action = name_key(str(obj.get("action", "")))
    if action in ("predict intent", "intent", "predict"):
        name = known_intent(obj.get("intent"), candidates)
        if name is None:
            return AssistantReply("invalid", json.dumps(obj), error=f"intent {obj.get('intent')!r} not in the list",
                                  repaired=repaired)
        return AssistantReply("intent", name, intent=name, repaired=repaired)
    if action in ("ask clarifying question", "clarify", "ask", "clarifying question"):
        q = " ".join(str(obj.get("question") or "").split())
        if not q:
            return AssistantReply("invalid", json.dumps(obj), error="empty clarifying question", repaired=repaired)
        return AssistantReply("clarify", q, repaired=repaired)
    if action in _OOD_KEYS:
        return AssistantReply("out_of_domain", OOD_TARGET, repaired=repaired)
    return AssistantReply("invalid", json.dumps(obj), error=f"unknown action {obj.get('action')!r}",
                          repaired=repaired)


def parse_assistant_reply(raw: str | None, candidates: list[str]) -> AssistantReply:
    """An intent name, a clarifying question, "out of domain", or invalid. Never raises.

    JSON replies ({"action", "intent", "question"}) are read first. Plain text (the paper's protocol): a reply that
    is a candidate name (case / `_` / `-` insensitive, optional "intent:" label) is that intent; one containing
    "out of domain" is OOD; one with a question mark is a clarifying question; a reply without a question mark
    that names exactly one candidate is that intent; anything else is invalid.
    """
    text = (raw or "").strip()
    if not text:
        return AssistantReply("invalid", "", error="empty reply")
    if text.startswith("{") or text.startswith("```"):
        read = JSON_READER.parse(text)
        if read.value is not None and "action" in read.value.root:
            return _assistant_json(read.value.root, candidates, read.repaired)
    body = _LEAD_RE.sub("", text, count=1).strip().strip("\"'*_` ")
    key = name_key(body).rstrip(".!")
    lookup = {name_key(c): c for c in candidates}
    if key in lookup:
        return AssistantReply("intent", lookup[key], intent=lookup[key])
    if key in _OOD_KEYS or "out of domain" in key:
        return AssistantReply("out_of_domain", OOD_TARGET)
    if "?" in body:
        return AssistantReply("clarify", " ".join(body.split()))
    mentioned = [c for k, c in lookup.items() if re.search(rf"\b{re.escape(k)}\b", key)]
    if len(mentioned) == 1:
        return AssistantReply("intent", mentioned[0], intent=mentioned[0])
    return AssistantReply("invalid", text, error="neither an intent from the list, a clarifying question, nor "
                                                 "out of domain")


def render_reply(reply: AssistantReply, structured: bool) -> str:
    """How an assistant turn appears in a conversation history (JSON in structured mode, else plain text)."""
    if not structured:
        return reply.text
    action = {"intent": "predict_intent", "clarify": "ask_clarifying_question",
              "out_of_domain": "out_of_domain"}.get(reply.action, "invalid")
    return json.dumps({"action": action, "intent": reply.intent or "none",
                       "question": reply.text if reply.action == "clarify" else ""})


# --------------------------------------------------------------------------- few-shot demos and the prompt

def _demo_problem(rec: Record, names: list[str]) -> str | None:
    if rec.problem:
        return problem_reason(rec)
    msgs = rec.data.get("messages")
    if not isinstance(msgs, list) or not msgs or not all(
            isinstance(m, dict) and m.get("role") in ("user", "assistant") and isinstance(m.get("content"), str)
            for m in msgs):
        return "needs messages [{role: user|assistant, content}, ...]"
    bad = [m["content"] for m in msgs if m["role"] == "assistant"
           and parse_assistant_reply(m["content"], names).action == "invalid"]
    if bad:
        return f"assistant turn {bad[:1]} is not an intent of the catalogue, a question or out of domain"
    if msgs[0]["role"] != "user" or msgs[-1]["role"] != "assistant":
        return "must start with the user and end with the assistant"
    return None


def load_few_shot(records: list[Record], names: list[str]) -> tuple[list[list[Message]], list[str]]:
    """Demo dialogues ({"messages": [...]}) whose assistant turns are usable; the rest listed with a reason."""
    demos, skipped = [], []
    for rec in records:
        problem = _demo_problem(rec, names)
        if problem:
            skipped.append(f"record {rec.record}: {problem}")
        else:
            demos.append(rec.data["messages"])
    return demos, skipped


def render_examples(demos: list[list[Message]], candidates: list[str], structured: bool) -> str:
    """The few-shot block; demos predicting an intent that is not a candidate (label dropout) are left out."""
    blocks = []
    for msgs in demos:
        lines = []
        for m in msgs:
            if m["role"] != "assistant":
                lines.append(f"user: {m['content']}")
                continue
            reply = parse_assistant_reply(m["content"], candidates)
            if reply.action == "invalid":
                break
            lines.append(f"assistant: {render_reply(reply, structured)}")
        else:
            blocks.append(f"Example {len(blocks) + 1}:\n" + "\n".join(lines))
    return "\n\n".join(blocks)


def assistant_messages(catalog: Catalog, candidates: list[str], demos: list[list[Message]],
                       history: list[Message], structured: bool, examples_per_intent: int) -> list[Message]:
    """System prompt (catalogue of the candidate intents + few-shot demos), then the conversation so far."""
    msgs = assistant_task(structured).template.messages(
        catalogue=catalog.render(candidates, examples_per_intent),
        examples=render_examples(demos, candidates, structured), query=history[0]["content"])
    return [*msgs, *history[1:]]


def assistant_request(catalog: Catalog, candidates: list[str], demos: list[list[Message]], history: list[Message],
                      structured: bool, examples_per_intent: int, max_tokens: int) -> ChatRequest:
    """One assistant turn; in structured mode with the reply grammar of this conversation's candidates."""
    task = assistant_task(structured)
    msgs = assistant_messages(catalog, candidates, demos, history, structured, examples_per_intent)
    req = task.request(msgs, max_tokens=max_tokens)
    return dataclasses.replace(req, json_schema=assistant_schema(tuple(candidates))) if structured else req


def training_system_prompt(catalog: Catalog, candidates: list[str], demos: list[list[Message]],
                           examples_per_intent: int) -> str:
    """The plain-text assistant prompt (the paper's output protocol) with the given candidate intents."""
    return assistant_messages(catalog, candidates, demos, [{"role": "user", "content": ""}], False,
                              examples_per_intent)[0]["content"]
