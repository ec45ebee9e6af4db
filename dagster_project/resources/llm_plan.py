"""Dry-run accounting for `clarify plan`: how many LLM calls and tokens a materialization would make.

PlanningClient is an LLMClient that reads the real cache (cached calls are free) but never starts a backend:
every call still to generate is counted (requests, samples, estimated prompt tokens, max output tokens,
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

from dagster_project.core.chat import ChatRequest, ChatResult
from dagster_project.core.config import LLMConfig, RoleConfig
from dagster_project.resources.llm import Job, LLMClient, LLMResource, Progress

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


class PlanningClient(LLMClient):
    """Counts instead of calling: see the module docstring."""

    def __init__(self, config: LLMConfig):
        super().__init__(config)
        self.plans: dict[str, RolePlan] = {}
        self.asset = ""

    def chat(self, role: str, requests: list[ChatRequest], progress: Progress | None = None) -> list[ChatResult]:
        cfg = self.config.role(role)
        plan = self.plans.setdefault(role, RolePlan(role, cfg.backend, cfg.model))
        self._plan = plan
        results = super().chat(role, requests, progress)
        plan.requests += len(requests)
        plan.samples += sum(len(r.texts) for r in results)
        plan.cached_samples += sum(r.cache_hits for r in results)
        if self.asset:
            plan.assets.add(self.asset)
        return results

    def _run(self, cfg: RoleConfig, label: str, pending: list[tuple[int, Job]], keys: list[list[str]],
             results: list[ChatResult], say: Progress) -> None:
        plan = self._plan
        for i, job in pending:
            prompt_tokens = sum(len(m.get("content") or "") for m in job.messages) // CHARS_PER_TOKEN + 4
            for idx in job.sample_indices:
                rng = random.Random(keys[i][idx])
                value = placeholder(job.json_schema, rng)
                results[i].texts[idx] = json.dumps(value) if job.json_schema else f"The answer is {value}."
            k = len(job.sample_indices)
            plan.new_samples += k
            plan.est_tokens_in += prompt_tokens * k
            plan.max_tokens_out += job.sampling["max_tokens"] * k
            plan.est_cost_usd += (prompt_tokens * k * cfg.price_in_per_mtok
                                  + job.sampling["max_tokens"] * k * cfg.price_out_per_mtok) / 1e6
        say(f"{label}: plan: {len(pending)} requests would be sent")

    def _record(self, *args: Any, **kwargs: Any) -> None:  # a plan is not usage
        return None


PLANNERS: list[PlanningClient] = []


class PlanningLLM(LLMResource):
    """LLMResource for dry runs: one PlanningClient per run, collected in PLANNERS for the caller."""

    def setup_for_execution(self, context: Any) -> None:
        from dagster_project.core.config import load_params

        self._client = PlanningClient(load_params(self.params_path).llm)
        PLANNERS.append(self._client)

    def chat(self, role: str, requests: list[ChatRequest], context: Any = None) -> list[ChatResult]:
        try:
            self._client.asset = context.asset_key.to_user_string() if context is not None else ""
        except Exception:  # noqa: BLE001 - a multi-asset context has no single key
            self._client.asset = ""
        return super().chat(role, requests, context)


def merge_plans(clients: list[PlanningClient]) -> list[RolePlan]:
    out: dict[tuple[str, str, str], RolePlan] = {}
    for c in clients:
        for p in c.plans.values():
            m = out.setdefault((p.role, p.backend, p.model), RolePlan(p.role, p.backend, p.model))
            for f in ("requests", "samples", "cached_samples", "new_samples", "est_tokens_in", "max_tokens_out"):
                setattr(m, f, getattr(m, f) + getattr(p, f))
            m.est_cost_usd += p.est_cost_usd
            m.assets |= p.assets
    return sorted(out.values(), key=lambda p: p.role)
