"""The one interface every ask-or-answer method shares: dialogue turns in, decisions + text + trace out.

A method is an object with a ``name``, the LLM ``calls_per_turn`` it spends, and
``predict(turns, chat, embed) -> list[Prediction]`` (one per turn, same order). ``chat`` sends a whole
batch of requests to the subject model (``llm.chat("subject:<name>", ...)`` in the Dagster layer), so
methods stay batch-first: each LLM step of a method is one call covering every turn it can serve.
Nothing here talks to a model or a file.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import polars as pl

from dagster_project.llm.chat import ChatRequest, ChatResult, Message
from dagster_project.llm.protocol import Decision, parse_decision

ChatFn = Callable[[list[ChatRequest]], list[ChatResult]]
EmbedFn = Callable[[list[str]], np.ndarray]


@dataclass(frozen=True)
class DialogueTurn:
    """One evaluated turn: the dialogue so far, ending with the user's latest message."""

    dialogue_id: str
    turn: int
    history: tuple[Message, ...]


@dataclass(frozen=True)
class MethodSettings:
    """The knobs methods read (from params.yaml: evaluation)."""

    max_tokens: int = 64
    reasoning_max_tokens: int = 192
    agent_max_tokens: int = 160
    vote_k: int = 5
    vote_temperature: float = 0.7
    intent_k: int = 5
    intent_temperature: float = 0.7
    intent_tau: float = 0.5
    seed: int = 0


@dataclass
class Prediction:
    """A method's decision on one turn, with everything needed to see why and what it cost."""

    action: str = "invalid"  # clarify | answer | invalid
    response: str | None = None  # the question or the answer, without the protocol prefix
    status: str = "ok"  # ok | parse_error | llm_error
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

    def charge(self, result: ChatResult) -> None:
        """Add one reply's usage to this turn's bill."""
        self.llm_calls += max(len(result.texts), 1)
        self.cache_hits += result.cache_hits
        self.tokens_in += result.tokens_in
        self.tokens_out += result.tokens_out
        self.latency_s += result.latency_s
        self.model = self.model or result.model

    def fail_llm(self, error: str) -> None:
        self.action, self.status, self.error = "invalid", "llm_error", error


class Method(Protocol):
    name: str
    calls_per_turn: int

    def predict(self, turns: Sequence[DialogueTurn], chat: ChatFn,
                embed: EmbedFn | None = None) -> list[Prediction]: ...


def decision_prediction(decision: Decision, raw: str) -> Prediction:
    """A Prediction from a protocol-parsed reply: invalid replies are parse_error rows, kept raw."""
    if decision.action == "invalid":
        return Prediction("invalid", decision.text or None, "parse_error",
                          "reply does not start with a protocol prefix", raw)
    return Prediction(decision.action, decision.text, "ok", None, raw)


def protocol_prediction(result: ChatResult, prompt_version: str) -> Prediction:
    """The base protocol on one reply (shared by the base prompt and CoT's final line)."""
    if result.error:
        p = Prediction(raw_output=result.text or None, prompt_version=prompt_version)
        p.fail_llm(result.error)
    else:
        p = decision_prediction(parse_decision(result.text), result.text)
        p.prompt_version = prompt_version
    p.charge(result)
    return p


AGENT_COLUMNS = {
    "slots": pl.Utf8, "rsc": pl.Boolean, "persona_forecast": pl.Utf8, "target_slot": pl.Utf8,
    "decided_by": pl.Utf8, "assumptions": pl.Utf8, "step_errors": pl.Int64,
}
PREDICTION_SCHEMA = {
    "action": pl.Utf8, "response": pl.Utf8, "status": pl.Utf8, "error": pl.Utf8, "raw_output": pl.Utf8,
    "trace": pl.Utf8, "llm_calls": pl.Int64, "cache_hits": pl.Int64, "tokens_in": pl.Int64,
    "tokens_out": pl.Int64, "latency_s": pl.Float64, "model": pl.Utf8, "prompt_version": pl.Utf8,
    **AGENT_COLUMNS,
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
            "latency_s": round(p.latency_s, 4), "model": p.model, "prompt_version": p.prompt_version, **agent,
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


# --------------------------------------------------------------------------- which dialogues are evaluated

def sample_dialogues(dialogues: pl.DataFrame, max_dialogues: int | None, seed: int,
                     persona_order: Sequence[str] = ()) -> list[str]:
    """Dialogue ids to evaluate: all of them, or ``max_dialogues`` spread evenly over personas.

    ``dialogues`` has one row per dialogue (dialogue_id, persona). The ids are shuffled with ``seed``,
    then taken round-robin across personas (in ``persona_order``, unknown/None last), so a sample of 6
    from the benchmark holds one dialogue per persona. The same ids are used for every method and
    subject, which keeps method comparisons paired.
    """
    ids = sorted(dialogues["dialogue_id"].unique().to_list())
    if max_dialogues is None or max_dialogues >= len(ids):
        return ids
    persona_of = dict(dialogues.select("dialogue_id", "persona").iter_rows())
    rng = random.Random(seed)
    rng.shuffle(ids)
    rank = {p: i for i, p in enumerate(persona_order)}
    groups: dict[Any, list[str]] = {}
    for d in ids:
        groups.setdefault(persona_of.get(d), []).append(d)
    order = sorted(groups, key=lambda p: (p not in rank, rank.get(p, 0), str(p)))
    picked: list[str] = []
    while len(picked) < max_dialogues:
        for p in order:
            if groups[p] and len(picked) < max_dialogues:
                picked.append(groups[p].pop(0))
    return sorted(picked)
