"""One batch of requests that mix steps (prompts, reply models, sampling) for one role, sent in one call."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from dagster_project.llm.chat import ChatRequest
from dagster_project.llm.task import Chat, LLMTask, Outcome

PROVENANCE = {"status": pl.Utf8, "error": pl.Utf8, "raw_output": pl.Utf8, "model": pl.Utf8,
              "prompt_version": pl.Utf8}
"""The provenance columns of every LLM table (Outcome.provenance())."""


@dataclass(frozen=True)
class Ask:
    """One request of a mixed batch: the step, the item it is about, its template values and sampling."""

    task: LLMTask[Any]
    item: Any
    values: Mapping[str, Any]
    sampling: Mapping[str, Any] = field(default_factory=dict)

    def request(self) -> ChatRequest:
        return self.task.request(self.values, **self.sampling)


def ask(chat: Chat, role: str, asks: list[Ask]) -> list[list[Outcome[Any, Any]]]:
    """Send every request to `role` in one call; per ask, its outcomes (one per sample)."""
    requests = [a.request() for a in asks]
    results = chat(role, requests) if requests else []
    return [a.task.outcomes(a.item, req, res) for a, req, res in zip(asks, requests, results, strict=True)]
