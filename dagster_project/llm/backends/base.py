"""What every backend shares: a job (samples still to generate for one request) and its output."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from dagster_project.llm.chat import Message

Progress = Callable[[str], None]


@dataclass
class Job:
    """Samples still to generate for one request (after the cache): which sample indices, with what settings."""

    messages: tuple[Message, ...]
    sampling: dict[str, Any]  # temperature, top_p, max_tokens, seed (resolved)
    sample_indices: list[int]
    json_schema: dict | None


@dataclass
class JobOutput:
    texts: list[str] = field(default_factory=list)
    truncated: list[bool] = field(default_factory=list)  # per text: cut off at max_tokens (finish reason length)
    tokens_in: int = 0
    tokens_out: int = 0
    error: str | None = None
    latency_s: float | None = None  # this job's own wall time, when the backend measures it
    model_s: float | None = None  # time inside the model call(s) only (no queueing, grammar set-up or backoff;
    #   llamacpp: its share of the time while several contexts decode at once, BusyClock)


class Backend(Protocol):
    """generate(jobs) -> outputs, one chunk at a time. A backend that can keep many requests in flight may
    also offer generate_each(jobs, on_done), calling on_done(i, output) as each job ends (see OpenAIBackend)."""

    chunk_size: int  # requests per call; also the grain of progress reports and cache commits

    def generate(self, jobs: list[Job]) -> list[JobOutput]: ...


def short_error(err: BaseException) -> str:
    return f"{type(err).__name__}: {str(err)[:500]}"

