"""The paper's plain evaluation prompt (Fig. 7c): the reply must open with the response-prefix protocol."""

from __future__ import annotations

from collections.abc import Sequence
from string import Template

import polars as pl

from dagster_project.core.clarifymt.agent.method import (
    ChatFn, DialogueTurn, EmbedFn, MethodSettings, Prediction, protocol_prediction,
)
from dagster_project.llm.chat import ChatRequest, ChatResult, Message
from dagster_project.llm.protocol import parse_decision
from dagster_project.llm.prompts import load_prompt

METHOD = "base"
CALLS_PER_TURN = 1


def base_messages(history: list[Message], prompt_name: str = "evaluate_base") -> list[Message]:
    """System instruction + the dialogue so far; the latest user message carries the protocol reminder.

    Other single-prompt methods (CoT, AT-CoT, Intent-Sim) reuse this layout with their own template,
    whose user part wraps the latest message as ``$message``.
    """
    prompt = load_prompt(prompt_name)
    *earlier, last = history
    last_user = Template(prompt.user).substitute(message=last["content"]).strip()
    return [{"role": "system", "content": prompt.system.strip()}, *earlier, {"role": "user", "content": last_user}]


def base_requests(histories: list[list[Message]], max_tokens: int) -> list[ChatRequest]:
    version = load_prompt("evaluate_base").version
    return [ChatRequest.of(base_messages(h), version, temperature=0.0, max_tokens=max_tokens) for h in histories]


def parse_predictions(results: list[ChatResult]) -> pl.DataFrame:
    """action (clarify / answer / invalid), response text, status: invalid replies are parse_error rows."""
    rows = []
    for res in results:
        d = parse_decision(res.text) if not res.error else None
        rows.append({
            "action": d.action if d else "invalid",
            "response": d.text if d else None,
            "status": "llm_error" if res.error else ("parse_error" if d.action == "invalid" else "ok"),
            "error": res.error or (None if d.action != "invalid" else "reply does not start with a protocol prefix"),
            "raw_output": res.text, "model": res.model, "latency_s": res.latency_s, "cached": res.cached,
            "tokens_in": res.tokens_in, "tokens_out": res.tokens_out,
        })
    return pl.DataFrame(rows, schema_overrides={"response": pl.Utf8, "error": pl.Utf8, "raw_output": pl.Utf8})


class BaseMethod:
    """The plain prompt (greedy): one call per turn, the reply parsed with the response-prefix protocol."""

    name = METHOD
    calls_per_turn = CALLS_PER_TURN

    def __init__(self, settings: MethodSettings):
        self.settings = settings

    def predict(self, turns: Sequence[DialogueTurn], chat: ChatFn, embed: EmbedFn | None = None) -> list[Prediction]:
        reqs = base_requests([list(t.history) for t in turns], self.settings.max_tokens)
        results = chat(reqs) if reqs else []
        return [protocol_prediction(r, q.prompt_version) for q, r in zip(reqs, results, strict=True)]
