"""Dry-run accounting for `clarify plan`: how many LLM calls and tokens a materialization would make.

A Planner is the LLM client's dry-run hook: the client reads the real cache (cached calls are free) and hands
the Planner every call still to generate instead of starting a backend. Each is counted (requests, samples, estimated prompt tokens, max output tokens,
estimated cost from the role's prices) and answered with a placeholder that fits the request's JSON schema,
so the assets downstream in the same selection run too and get counted. Placeholder replies are NOT cached.
Downstream counts are estimates: they depend on what the real model would have answered (kept rows,
parse errors); placeholders keep every row (highest ratings, distinct texts), so they are upper-bound-ish.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

from dagster_project.config import RoleConfig
from dagster_project.llm.backends.base import Job
from dagster_project.llm.chat import ChatRequest, ChatResult

CHARS_PER_TOKEN = 4  # rough prompt-token estimate without a tokenizer
_WORDS = ("harbor", "violin", "glacier", "pepper", "lantern", "orbit", "meadow", "ledger", "canyon", "falcon",
          "quartz", "saddle", "tundra", "walnut", "beacon", "cactus", "dynamo", "ember", "fjord", "gazebo",
          "hammock", "igloo", "jasmine", "kayak", "lagoon", "magnet", "nectar", "oasis", "parsley", "quiver",
          "raisin", "satchel", "trumpet", "umbrella", "velvet", "waffle", "yogurt", "zeppelin", "anchor",
          "biscuit", "compass", "domino", "easel", "feather", "granite", "helmet", "iris", "jigsaw", "kettle",
          "lobster", "mosaic", "noodle", "opera", "pigeon", "quilt", "rocket", "spindle", "tractor", "unicorn",
          "volcano", "whistle", "yacht", "zinnia", "asteroid", "bamboo", "chimney", "dolphin", "espresso")


def placeholder(schema: dict[str, Any] | None, rng: random.Random) -> Any:
    """A value that satisfies common JSON-schema constraints (type, enum, min/max, lengths, required)."""
    if not schema:
        return " ".join(rng.choice(_WORDS) for _ in range(6))
    if "enum" in schema:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return placeholder(schema[key][0], rng)
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties", {})
        return {k: placeholder(v, rng) for k, v in props.items()}
    if kind == "array":
        n = max(1, schema.get("minItems", 1))
        return [placeholder(schema.get("items", {}), rng) for _ in range(n)]
    if kind in ("integer", "number"):
        value = schema.get("maximum", schema.get("minimum", 1))
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    lo, hi = schema.get("minLength", 0), schema.get("maxLength", 80)
    text = " ".join(rng.choice(_WORDS) for _ in range(8))
    text = (text + " " + text)[:hi] if len(text) < lo else text[:hi]
    return text.ljust(lo, "x")


@dataclass
class RolePlan:
    role: str
    backend: str
    model: str
    requests: int = 0
    samples: int = 0
    cached_samples: int = 0
    new_samples: int = 0
    est_tokens_in: int = 0
    max_tokens_out: int = 0
    est_cost_usd: float = 0.0
    assets: set[str] = field(default_factory=set)


class Planner:
    """Counts instead of calling (the LLMClient's `dry_run` hook): see the module docstring."""

    def __init__(self) -> None:
        self.plans: dict[tuple[str, str, str], RolePlan] = {}
        # placeholders already given, by cache key: a real run caches its first reply, so a later call with the
        # same key is a cache hit there and must be one here (same reply, not counted again)
        self.answered: dict[str, str] = {}

    def count(self, role: str, cfg: RoleConfig, requests: list[ChatRequest], results: list[ChatResult],
              tag: str) -> None:
        """Every request the client was asked for, cached or not."""
        plan = self._plan(role, cfg)
        plan.requests += len(requests)
        plan.samples += sum(len(r.texts) for r in results)
        plan.cached_samples += sum(r.cache_hits for r in results)
        if tag:
            plan.assets.add(tag)

    def answer(self, role: str, cfg: RoleConfig, jobs: list[Job], keys: list[list[str]], tag: str) -> list[list[str]]:
        plan = self._plan(role, cfg)
        answers, new = [], {}
        for job, job_keys in zip(jobs, keys, strict=True):
            prompt_tokens = sum(len(m.get("content") or "") for m in job.messages) // CHARS_PER_TOKEN + 4
            texts, k = [], 0
            for idx in job.sample_indices:
                key = job_keys[idx]
                if key in self.answered:  # answered by an earlier call: the real run reads it from its cache
                    texts.append(self.answered[key])
                    plan.cached_samples += 1
                    continue
                value = placeholder(job.json_schema, random.Random(key))
                texts.append(json.dumps(value) if job.json_schema else f"The answer is {value}.")
                new[key] = texts[-1]
                k += 1
            answers.append(texts)
            plan.new_samples += k
            plan.est_tokens_in += prompt_tokens * k
            plan.max_tokens_out += job.sampling["max_tokens"] * k
            plan.est_cost_usd += (prompt_tokens * k * cfg.price_in_per_mtok
                                  + job.sampling["max_tokens"] * k * cfg.price_out_per_mtok) / 1e6
        self.answered |= new  # only after the call: duplicates within one call are all sent by a real run too
        return answers

    def _plan(self, role: str, cfg: RoleConfig) -> RolePlan:
        return self.plans.setdefault((role, cfg.backend, cfg.model), RolePlan(role, cfg.backend, cfg.model))

    def summary(self) -> list[RolePlan]:
        return sorted(self.plans.values(), key=lambda p: p.role)
