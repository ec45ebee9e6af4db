"""Backend-neutral chat request/result types and their accounting (pure: no I/O, no model)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

Message = dict[str, str]


@dataclass(frozen=True)
class Sampling:
    """Decoding settings for one request; None means "use the role's default"."""

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    n: int = 1


@dataclass(frozen=True)
class ChatRequest:
    """One prompt: messages, sampling, optional JSON schema, and the template version that produced it."""

    messages: tuple[Message, ...]
    sampling: Sampling = Sampling()
    json_schema: dict[str, Any] | None = None
    prompt_version: str = ""

    @staticmethod
    def of(messages: list[Message], prompt_version: str = "", json_schema: dict | None = None,
           **sampling: Any) -> ChatRequest:
        return ChatRequest(tuple(dict(m) for m in messages), Sampling(**sampling), json_schema, prompt_version)


@dataclass
class ChatResult:
    """The reply to one request: one text per sample, with usage and what went wrong, if anything."""

    texts: list[str] = field(default_factory=list)
    truncated: list[bool] = field(default_factory=list)  # per text: cut off at max_tokens
    tokens_in: int = 0
    tokens_out: int = 0
    latency_s: float = 0.0
    model_s: float = 0.0  # the backend's own generation time (latency_s also counts waiting for a turn)
    cached: bool = False
    cache_hits: int = 0
    error: str | None = None
    model: str = ""

    @property
    def text(self) -> str:
        return self.texts[0] if self.texts else ""

    @property
    def ok(self) -> bool:
        return self.error is None


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def sample_cache_key(identity: dict[str, str], request: ChatRequest, resolved: dict[str, Any],
                     sample_index: int) -> str:
    """sha256 over (model identity, messages, resolved sampling, sample index, schema, prompt version).

    Never includes API keys, base URLs or timeouts: the same question to the same model hits the cache
    whichever endpoint serves it.
    """
    payload = {
        "model": identity,
        "messages": list(request.messages),
        "sampling": resolved,
        "sample_index": sample_index,
        "schema": request.json_schema,
        "prompt_version": request.prompt_version,
    }
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def usage_key(metric: str, role: str | None = None) -> str:
    """The one naming scheme of LLM usage metadata: `llm/<metric>` over all roles, `llm/<role>/<metric>` per role."""
    return f"llm/{role}/{metric}" if role else f"llm/{metric}"


def parse_usage_key(key: str) -> tuple[str | None, str] | None:
    """(role or None for the all-roles total, metric) of a usage_key; None for any other key."""
    if not key.startswith("llm/"):
        return None
    role, _, metric = key.removeprefix("llm/").rpartition("/")
    return (role or None, metric) if metric else None


def usage_summary(results: list[ChatResult], price_in_per_mtok: float = 0.0, price_out_per_mtok: float = 0.0,
                  role: str | None = None) -> dict[str, float | int]:
    """Calls, cache hits, tokens, errors, time and estimated cost of a batch (Dagster metadata, keys from usage_key).

    latency_s sums each request's wall time, waits for a free slot included; model_s only the backend's own
    generation time, which `clarify timings` sets against a stage's wall time."""
    samples = sum(max(len(r.texts), 1) for r in results)
    hits = sum(r.cache_hits for r in results)
    tin = sum(r.tokens_in for r in results)
    tout = sum(r.tokens_out for r in results)
    numbers = {
        "requests": len(results),
        "samples": samples,
        "cache_hits": hits,
        "new_calls": samples - hits,
        "errors": sum(1 for r in results if r.error),
        "tokens_in": tin,
        "tokens_out": tout,
        "latency_s": round(sum(r.latency_s for r in results), 2),
        "model_s": round(sum(r.model_s for r in results), 2),
        "est_cost_usd": round((tin * price_in_per_mtok + tout * price_out_per_mtok) / 1e6, 4),
    }
    return {usage_key(k, role): v for k, v in numbers.items()}
