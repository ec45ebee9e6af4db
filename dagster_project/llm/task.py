"""One LLM step = one LLMTask: prompt template + pydantic reply model + role (+ an optional post-check).

The reply model is both the JSON schema sent to the backend (grammar / structured output) and the
validation of the reply, so the two can never drift. Running a task over input items returns one
`Outcome` per item and sample, carrying the provenance every LLM table keeps: status (one `Status`
type), error, raw_output, model, prompt_version (and `repaired` where lenient JSON recovery is on).
Parsing never raises: a bad reply is a row with a status, not an exception.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated, Any, Generic, TypeVar

import polars as pl
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from dagster_project.io.status import STATUSES, Status
from dagster_project.llm.chat import ChatRequest, ChatResult, Message, canonical_json
from dagster_project.llm.prompts import Prompt, ReplyFormat, load_prompt



Chat = Callable[[str, list[ChatRequest]], list[ChatResult]]
"""core/'s only door to a model: chat(role, requests) -> one result per request (an LLMSession in Dagster)."""


# --------------------------------------------------------------------------- reply models

def _non_empty(value: str) -> str:
    if not value.strip():
        raise ValueError("is empty")
    return value


NonEmpty = Annotated[str, AfterValidator(_non_empty)]
"""A string field that must hold more than whitespace (the usual free-text reply field)."""


def text_field(max_length: int | None = None, **kwargs: Any) -> Any:
    """A free-text field whose `maxLength` goes into the schema (so a reply cannot run past max_tokens)
    but is not re-checked on validation: the grammar enforces it, and an API's overrun is still usable."""
    extra = {"maxLength": max_length} if max_length is not None else None
    return Field(json_schema_extra=extra, **kwargs)


class Reply(BaseModel):
    """Base of every JSON reply model: strict types (no "4" for 4, no true for 1), extra keys ignored."""

    model_config = ConfigDict(strict=True, extra="ignore")


def reply_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema as backends want it: references inlined, titles and defaults dropped."""
    raw = model.model_json_schema()
    defs = raw.pop("$defs", {})

    def clean(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return clean(defs[node["$ref"].rsplit("/", 1)[-1]])
            return {k: clean(v) for k, v in node.items() if k not in ("title", "default", "description")}
        if isinstance(node, list):
            return [clean(v) for v in node]
        return node

    return clean(raw)


def _describe(err: ValidationError) -> str:
    """The first validation problem in the words the tables have always used."""
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    if first["type"] == "missing":
        return f"missing field {loc!r}"
    if first["type"] == "value_error" and "is empty" in first["msg"]:
        return f"field {loc!r} is empty"
    if first["type"] in _TYPE_NAMES:
        return f"field {loc!r} should be {_TYPE_NAMES[first['type']]}, got {type(first['input']).__name__}"
    return f"field {loc!r}: {first['msg']}"


_TYPE_NAMES = {"string_type": "str", "int_type": "int", "float_type": "float", "bool_type": "bool",
               "list_type": "list", "dict_type": "dict", "model_type": "object"}


# --------------------------------------------------------------------------- JSON in a reply

_FENCE_RE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)


def parse_json_object(raw: str | None, lenient: bool = False) -> tuple[dict[str, Any] | None, str | None, bool]:
    """(object, None, repaired) or (None, reason, False). Accepts code fences and chatter around the object.

    lenient: one more try that allows raw control characters inside strings (small grammar-constrained models
    emit raw newlines there; strict JSON forbids them but nothing is ambiguous). A success that needed it
    is reported as repaired."""
    text = (raw or "").strip()
    if not text:
        return None, "empty output", False
    fenced = _FENCE_RE.search(text)
    candidates = [fenced.group(1)] if fenced else []
    start, end = text.find("{"), text.rfind("}")
    if start != -1 and end > start:
        candidates.append(text[start:end + 1])
    candidates.append(text)
    err = "no JSON object found"
    for cand in candidates:
        try:
            obj = json.loads(cand)
        except json.JSONDecodeError as e:
            err = f"invalid JSON: {e.msg} at char {e.pos}"
            continue
        if isinstance(obj, dict):
            return obj, None, False
        err = f"expected a JSON object, got {type(obj).__name__}"
    if lenient and "control character" in err and start != -1 and end > start:
        try:
            obj = json.loads(text[start:end + 1], strict=False)
        except json.JSONDecodeError:
            return None, err, False
        if isinstance(obj, dict):
            return obj, None, True
    return None, err, False


# --------------------------------------------------------------------------- the task

R = TypeVar("R")
Item = TypeVar("Item")


@dataclass(frozen=True)
class Parsed(Generic[R]):
    """One reply after parsing: the validated value, or why there is none."""

    status: Status
    value: R | None = None
    error: str | None = None
    repaired: bool = False


@dataclass(frozen=True)
class Outcome(Generic[Item, R]):
    """One (item, sample) after the LLM: what was asked for, what came back, and what it is worth."""

    item: Item
    sample: int
    status: Status
    value: R | None
    error: str | None
    raw_output: str | None
    model: str
    prompt_version: str
    repaired: bool = False

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def provenance(self, repaired: bool = False) -> dict[str, Any]:
        """The provenance columns of an LLM row (with `repaired` for tasks that use lenient recovery)."""
        row = {"status": self.status.value, "error": self.error, "raw_output": self.raw_output,
               "model": self.model, "prompt_version": self.prompt_version}
        return row | {"repaired": self.repaired} if repaired else row


PROVENANCE_SCHEMA = {"status": pl.Utf8, "error": pl.Utf8, "raw_output": pl.Utf8, "model": pl.Utf8,
                     "prompt_version": pl.Utf8}
"""The provenance columns of every LLM table (Outcome.provenance()), as polars types."""


@dataclass(frozen=True)
class Ask:
    """One request of a batch: the item it is about, the task that parses its reply, the request itself.
    A batch may mix tasks (prompts, reply models, sampling) as long as they go to one role."""

    item: Any
    task: LLMTask[Any]
    request: ChatRequest


@dataclass(frozen=True)
class Answer:
    """An ask after the model: its item, the backend's result (usage, latency, cache) and the outcomes per sample."""

    item: Any
    result: ChatResult
    outcomes: list[Outcome[Any, Any]]

    @property
    def first(self) -> Outcome[Any, Any]:
        return self.outcomes[0]


def ask_all(chat: Chat, role: str, asks: Sequence[Ask], once: bool = False) -> list[Answer]:
    """Send every ask's request to `role` in one call; answers in ask order (no call for no asks).

    once: identical requests (messages, schema, sampling, template version) are sent once, and every ask
    that rendered to one shares its result (sessions that share a first turn ask it once)."""
    keys = [canonical_json([list(a.request.messages), a.request.json_schema, dataclasses.asdict(a.request.sampling),
                            a.request.prompt_version]) if once else str(i) for i, a in enumerate(asks)]
    distinct = {k: a.request for k, a in reversed(list(zip(keys, asks)))}
    order = list(dict.fromkeys(keys))
    results = dict(zip(order, chat(role, [distinct[k] for k in order]) if order else [], strict=True))
    return [Answer(a.item, results[k], a.task.outcomes(a.item, a.request, results[k])) for k, a in zip(keys, asks)]


Render = Callable[[Any], "Mapping[str, Any] | list[Message]"]


@dataclass(frozen=True)
class LLMTask(Generic[R]):
    """One LLM step. `reply` is a pydantic model (JSON reply) or None (free text: the value is the text).

    check(value, item) -> reason | None runs after validation: a reason makes the row a parse_error.
    lenient turns on lenient JSON recovery (counted per row in `repaired`).
    A free-text reply cut off at max_tokens is a parse_error (reason "truncated") unless accept_truncated:
    for replies whose use is decided by their opening words (the response-prefix protocol).
    sampling holds the step's defaults (temperature, top_p, max_tokens, seed, n); calls may override them.
    fmt picks the reply format of a template written for both (its `### formats` section); None for the others.
    """

    prompt: str
    role: str
    reply: type[BaseModel] | None = None
    check: Callable[[Any, Any], str | None] | None = None
    lenient: bool = False
    sampling: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    accept_truncated: bool = False
    fmt: ReplyFormat | None = None

    @cached_property
    def template(self) -> Prompt:
        return load_prompt(self.prompt, self.fmt)

    @property
    def version(self) -> str:
        return self.template.version

    @cached_property
    def schema(self) -> dict[str, Any] | None:
        return reply_schema(self.reply) if self.reply is not None else None

    def with_reply(self, reply: type[BaseModel]) -> LLMTask[R]:
        """The same step with a reply model built at run time (e.g. an enum of this run's intent names)."""
        return dataclasses.replace(self, reply=reply)

    def request(self, values: Mapping[str, Any] | list[Message], **sampling: Any) -> ChatRequest:
        """Render the template with values (or take ready-made messages) into a request with the reply schema."""
        messages = values if isinstance(values, list) else self.template.messages(**values)
        return ChatRequest.of(messages, self.version, self.schema, **(dict(self.sampling) | sampling))

    def ask(self, item: Any, values: Mapping[str, Any] | list[Message], **sampling: Any) -> Ask:
        """One request of this step about `item`, for `ask_all` (batches that mix steps or dedupe requests)."""
        return Ask(item, self, self.request(values, **sampling))

    def parse(self, text: str | None, item: Any = None) -> Parsed[R]:
        """Validate one reply text; never raises."""
        if self.reply is None:
            value: Any = text or ""
            repaired = False
        else:
            obj, err, repaired = parse_json_object(text, self.lenient)
            if obj is None:
                return Parsed(Status.PARSE_ERROR, error=err)
            try:
                value = self.reply.model_validate(obj)
            except ValidationError as e:
                return Parsed(Status.PARSE_ERROR, error=_describe(e), repaired=repaired)
        reason = self.check(value, item) if self.check is not None else None
        if reason:
            return Parsed(Status.PARSE_ERROR, error=reason, repaired=repaired)
        return Parsed(Status.OK, value=value, repaired=repaired)

    def outcomes(self, item: Any, request: ChatRequest, result: ChatResult) -> list[Outcome[Any, R]]:
        """One outcome per sample of a request that was sent."""
        out = []
        for i in range(request.sampling.n):
            if result.error:
                out.append(Outcome(item, i, Status.LLM_ERROR, None, result.error, None, result.model,
                                   request.prompt_version))
                continue
            text = result.texts[i] if i < len(result.texts) else ""
            p = self.parse(text, item)
            cut = i < len(result.truncated) and result.truncated[i]
            if cut and p.status is Status.PARSE_ERROR:
                p = dataclasses.replace(p, error=f"truncated: cut off at max_tokens ({p.error})")
            elif cut and self.reply is None and not self.accept_truncated:
                p = Parsed(Status.PARSE_ERROR, error="truncated: cut off at max_tokens")
            out.append(Outcome(item, i, p.status, p.value, p.error, text, result.model, request.prompt_version,
                               p.repaired))
        return out

    def run(self, chat: Chat, items: Sequence[Item], render: Render,
            sampling: Callable[[Item], Mapping[str, Any]] | None = None) -> list[Outcome[Item, R]]:
        """Ask the task's role once per item (one batch), in item order; n samples per item give n outcomes.

        render(item) gives template values (or messages); sampling(item) per-item overrides (e.g. a seed).
        An item that cannot be rendered becomes an input_error outcome and is not sent."""
        asks: list[Ask] = []
        failed: dict[int, Outcome[Item, R]] = {}
        for idx, item in enumerate(items):
            try:
                asks.append(self.ask(item, render(item), **(dict(sampling(item)) if sampling else {})))
            except (KeyError, ValueError, TypeError) as err:
                failed[idx] = Outcome(item, 0, Status.INPUT_ERROR, None, f"cannot render {self.prompt}: {err!r}",
                                      None, "", self.version)
        answered = iter(ask_all(chat, self.role, asks))
        out: list[Outcome[Item, R]] = []
        for idx in range(len(items)):
            out.extend([failed[idx]] if idx in failed else next(answered).outcomes)
        return out
