"""The one interface every ask-or-answer method shares: dialogue turns in, decisions + text + trace out.

A method is an object with a ``name``, the LLM ``calls_per_turn`` it spends, the subject ``role`` it
asks (``subject:<name>``), and ``predict(turns, chat, embed) -> list[Prediction]`` (one per turn, same
order). ``chat(role, requests)`` sends a whole batch to the model, so methods stay batch-first: each LLM
step of a method is one call covering every turn it can serve. Nothing here talks to a model or a file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Protocol

import polars as pl
from pydantic import ConfigDict, WithJsonSchema

from dagster_project.config import EvaluationConfig
from dagster_project.core.shared.dedup import Embed
from dagster_project.llm.chat import ChatResult, Message
from dagster_project.llm.protocol import Decision, parse_decision
from dagster_project.llm.task import (
    Answer,
    Chat,
    LLMTask,
    NonEmpty,
    Outcome,
    Reply,
    Status,
    ask_all,
)


@dataclass(frozen=True)
class DialogueTurn:
    """One evaluated turn: the dialogue so far, ending with the user's latest message."""

    dialogue_id: str
    turn: int
    history: tuple[Message, ...]


@dataclass
class Prediction:
    """A method's decision on one turn, with everything needed to see why and what it cost."""

    action: str = "invalid"  # clarify | answer | invalid
    response: str | None = None  # the question or the answer, without the protocol prefix
    status: Status = Status.OK
    error: str | None = None
    raw_output: str | None = None
    trace: dict[str, Any] = field(default_factory=dict)
    llm_calls: int = 0  # generations used for this turn (k samples count k)
    cache_hits: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    latency_s: float = 0.0
    model: str = ""
    prompt_version: str = ""
    agent: dict[str, Any] = field(default_factory=dict)  # ClarifyAgent columns (slots, persona, RSC, plan)
    protocol_ok: float | None = None  # share of this turn's replies that followed the reply format (None: no reply)
    truncated_replies: int = 0  # generations of this turn the backend stopped at max_tokens (finish reason length)

    def charge(self, result: ChatResult) -> None:
        """Add one reply's usage to this turn's row (the table's per-turn cost columns)."""
        self.llm_calls += max(len(result.texts), 1)
        self.truncated_replies += sum(bool(t) for t in result.truncated)
        self.cache_hits += result.cache_hits
        self.tokens_in += result.tokens_in
        self.tokens_out += result.tokens_out
        self.latency_s += result.latency_s
        self.model = self.model or result.model

    def fail_llm(self, error: str) -> None:
        """The model gave no answer: the turn is invalid with status llm_error."""
        self.action, self.status, self.error = "invalid", Status.LLM_ERROR.value, error


class Method(Protocol):
    name: str
    calls_per_turn: int
    role: str

    def predict(self, turns: Sequence[DialogueTurn], chat: Chat,
                embed: Embed | None = None) -> list[Prediction]: ...


class SubjectMethod:
    """What the prompting methods share: the evaluation settings and the subject role they ask (one call a turn)."""

    calls_per_turn = 1

    def __init__(self, cfg: EvaluationConfig, role: str = "subject"):
        self.cfg, self.role = cfg, role


# --------------------------------------------------------------------------- asking the subject model

def ask(chat: Chat, role: str, jobs: Sequence[tuple[Any, LLMTask[Any], Mapping[str, Any] | list[Message]]],
        **sampling: Any) -> list[Answer]:
    """One batch for every (item, task, values-or-messages) job with the same sampling; answers in job order.

    Identical requests are sent once and share their answer: turn 1 of a query's six persona dialogues is one
    prompt, evaluated once (the metrics then count it once, see core/clarifymt/metrics.py)."""
    return ask_all(chat, role, [task.ask(item, values, **sampling) for item, task, values in jobs], once=True)


def json_string(**schema: Any) -> WithJsonSchema:
    """A string field's exact schema (e.g. minLength, enum) for the grammar; validation stays the field's own."""
    return WithJsonSchema({"type": "string", **schema})


def schema_required(*names: str) -> ConfigDict:
    """Reply config whose schema requires `names` even where validation tolerates a missing field."""
    return ConfigDict(strict=True, extra="ignore", json_schema_extra={"required": list(names)})


# --------------------------------------------------------------------------- the reply formats

_INTERROGATIVE = re.compile(r"^[\W_]*(?:what|which|who|whom|whose|where|when|why|how|do|does|did|is|are|was|were|am|"
                            r"can|could|would|will|shall|should|may|might|have|has|had)\b", re.IGNORECASE)


def is_question(text: str | None) -> bool:
    """The rule for a clarify reply: a question mark, or a sentence that opens in interrogative form."""
    t = (text or "").strip()
    return "?" in t or any(_INTERROGATIVE.match(s) for s in re.split(r"(?<=[.!;:\n])\s+", t) if s)


class DecisionReply(Reply):
    """The structured_output form of the protocol: the decision, then the question or the answer."""

    model_config = schema_required("action", "text")

    action: Annotated[NonEmpty, json_string(enum=["clarify", "answer"])]
    text: Annotated[NonEmpty, json_string(minLength=1, maxLength=400)]


def check_action(value: Any, _: Any) -> str | None:
    """A JSON decision must be clarify or answer (the grammar says so; a free backend may not)."""
    return None if value.action in ("clarify", "answer") else f"action {value.action!r} is not clarify/answer"


def decision_of(outcome: Outcome[Any, Any]) -> Decision:
    """The decision of one sample: the prefix protocol on free text, the JSON fields on a structured reply."""
    if not outcome.ok:
        return Decision("invalid", (outcome.raw_output or "").strip())
    if isinstance(outcome.value, str):
        return parse_decision(outcome.value)
    return Decision(outcome.value.action, outcome.value.text.strip())


NOT_PROTOCOL = "reply does not start with a protocol prefix"


def decision_prediction(decision: Decision, raw: str, error: str | None = None) -> Prediction:
    """A Prediction from a parsed reply: invalid replies are parse_error rows, kept raw; protocol_ok 1 or 0."""
    if decision.action == "invalid":
        return Prediction("invalid", decision.text or None, Status.PARSE_ERROR.value, error or NOT_PROTOCOL, raw,
                          protocol_ok=0.0)
    return Prediction(decision.action, decision.text, Status.OK.value, None, raw, protocol_ok=1.0)


def failed_prediction(answer: Answer) -> Prediction:
    """The row of a turn whose request failed (llm_error), with its usage."""
    p = Prediction(raw_output=answer.result.text or None, prompt_version=answer.first.prompt_version)
    p.fail_llm(answer.result.error or "")
    p.charge(answer.result)
    return p


def answered(answer: Answer, read: Callable[[Answer], Prediction]) -> Prediction:
    """The row of a one-call turn: an llm_error row when the call failed, else read(answer), stamped with the
    call's template version and usage."""
    if answer.result.error:
        return failed_prediction(answer)
    p = read(answer)
    p.prompt_version = answer.first.prompt_version
    p.charge(answer.result)
    return p


def protocol_prediction(answer: Answer) -> Prediction:
    """One reply read by its format (prefix protocol on free text, DecisionReply on JSON): the base prompt."""
    return answered(answer, lambda a: decision_prediction(decision_of(a.first), a.result.text, a.first.error))


# --------------------------------------------------------------------------- tables

AGENT_COLUMNS = {
    "slots": pl.Utf8, "rsc": pl.Boolean, "persona_forecast": pl.Utf8, "target_slot": pl.Utf8,
    "decided_by": pl.Utf8, "assumptions": pl.Utf8, "step_errors": pl.Int64,
}
PREDICTION_SCHEMA = {
    "action": pl.Utf8, "response": pl.Utf8, "status": pl.Utf8, "error": pl.Utf8, "raw_output": pl.Utf8,
    "trace": pl.Utf8, "llm_calls": pl.Int64, "cache_hits": pl.Int64, "tokens_in": pl.Int64,
    "tokens_out": pl.Int64, "latency_s": pl.Float64, "model": pl.Utf8, "prompt_version": pl.Utf8,
    "protocol_ok": pl.Float64, "is_question": pl.Boolean, "truncated_replies": pl.Int64, **AGENT_COLUMNS,
}


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def predictions_frame(preds: Sequence[Prediction]) -> pl.DataFrame:
    """One row per prediction; the trace (and the agent's slot table) as JSON text DuckDB can query."""
    rows = []
    for p in preds:
        agent = {k: p.agent.get(k) for k in AGENT_COLUMNS}
        for k in ("slots", "assumptions"):
            if agent[k] is not None:
                agent[k] = _json(agent[k])
        rows.append({
            "action": p.action, "response": p.response, "status": p.status, "error": p.error,
            "raw_output": p.raw_output, "trace": _json(p.trace), "llm_calls": p.llm_calls,
            "cache_hits": p.cache_hits, "tokens_in": p.tokens_in, "tokens_out": p.tokens_out,
            "latency_s": round(p.latency_s, 4), "model": p.model, "prompt_version": p.prompt_version,
            "protocol_ok": p.protocol_ok, "is_question": is_question(p.response) if p.action == "clarify" else None,
            "truncated_replies": p.truncated_replies,
            **agent,
        })
    return pl.DataFrame(rows, schema=PREDICTION_SCHEMA)


def turns_from_frame(df: pl.DataFrame) -> list[DialogueTurn]:
    """DialogueTurns from rows with dialogue_id, turn and messages (the benchmark's turn schema)."""
    return [DialogueTurn(r["dialogue_id"], int(r["turn"]), tuple(dict(m) for m in r["messages"]))
            for r in df.select("dialogue_id", "turn", "messages").iter_rows(named=True)]


def transcript(history: Sequence[Message]) -> str:
    """The dialogue as plain text, one 'User:' / 'Assistant:' line per message."""
    names = {"user": "User", "assistant": "Assistant"}
    return "\n".join(f"{names.get(m['role'], m['role'])}: {m['content']}" for m in history
                     if m["role"] in names)
