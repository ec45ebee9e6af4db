"""Pydantic models for params.yaml: every knob of the pipeline, validated with errors that name the key."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class RoleConfig(_Strict):
    """One model behind a role: which backend, which model, and its sampling defaults."""

    backend: Literal["llamacpp", "openai", "vllm"] = "llamacpp"
    model: str = "smollm2-135m-instruct"
    base_url: str | None = None
    api_key_env: str | None = None
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(256, gt=0)
    seed: int = 0
    concurrency: int = Field(8, gt=0)
    timeout_s: float = Field(120.0, gt=0)
    max_retries: int = Field(3, ge=0)
    n_ctx: int = Field(2048, gt=0)
    n_threads: int | None = None
    engine_kwargs: dict[str, object] = Field(default_factory=dict)
    price_in_per_mtok: float = Field(0.0, ge=0.0)
    price_out_per_mtok: float = Field(0.0, ge=0.0)

    @model_validator(mode="after")
    def _openai_needs_endpoint(self) -> RoleConfig:
        if self.backend == "openai" and not self.base_url:
            raise ValueError("backend 'openai' needs base_url (e.g. https://api.openai.com/v1)")
        return self

    def identity(self) -> dict[str, str]:
        """What identifies the model for the cache: never the key, URL or timeout."""
        return {"backend": self.backend, "model": self.model}


ROLE_NAMES = (
    "generator", "extractor", "reasoner", "user_simulator", "judge",
    "answerer", "clarifier", "assistant", "reranker",
)


class LLMConfig(_Strict):
    cache_path: str = ".cache/llm_cache.sqlite"
    roles: dict[str, RoleConfig] = Field(default_factory=lambda: {"default": RoleConfig()})
    subjects: dict[str, RoleConfig] = Field(default_factory=lambda: {"smollm2": RoleConfig()})

    @model_validator(mode="after")
    def _known_roles(self) -> LLMConfig:
        if "default" not in self.roles:
            raise ValueError("llm.roles must define 'default' (the fallback for unset roles)")
        unknown = set(self.roles) - set(ROLE_NAMES) - {"default"}
        if unknown:
            raise ValueError(f"unknown role(s) {sorted(unknown)}; known roles: {['default', *ROLE_NAMES]}")
        if not self.subjects:
            raise ValueError("llm.subjects must list at least one subject model")
        return self

    def role(self, name: str) -> RoleConfig:
        """The config for a role, a subject ('subject:<name>'), or the default."""
        if name.startswith("subject:"):
            sub = name.split(":", 1)[1]
            if sub not in self.subjects:
                raise KeyError(f"unknown subject {sub!r}; params.yaml llm.subjects has {sorted(self.subjects)}")
            return self.subjects[sub]
        return self.roles.get(name, self.roles["default"])


class EmbedderConfig(_Strict):
    model: str = "all-MiniLM-L6-v2"
    batch_size: int = Field(64, gt=0)


class QualityConfig(_Strict):
    max_error_rate: float = Field(0.2, ge=0.0, le=1.0)


class BenchmarkConfig(_Strict):
    n_per_subtype: int = Field(2, gt=0, description="paper: 85")
    generation_temperature: float = Field(0.9, ge=0.0, le=2.0)
    simulation_temperature: float = Field(0.7, ge=0.0, le=2.0)
    dedup_tau: float = Field(0.7, gt=0.0, le=1.0)
    dedup_block: int = Field(2048, gt=0)
    subtypes: list[str] | None = None
    personas: list[str] | None = None
    annotations_path: str | None = None

    @model_validator(mode="after")
    def _known_names(self) -> BenchmarkConfig:
        from dagster_project.core.taxonomy import PERSONAS, QUERY_SUBTYPES

        for field, names, known in (
            ("subtypes", self.subtypes, {s.key for s in QUERY_SUBTYPES}),
            ("personas", self.personas, {p.key for p in PERSONAS}),
        ):
            bad = sorted(set(names or []) - known)
            if bad:
                raise ValueError(f"benchmark.{field}: unknown {bad}; known: {sorted(known)}")
        return self


class EvaluationConfig(_Strict):
    methods: list[Literal["base"]] = Field(default_factory=lambda: ["base"])
    subject_max_tokens: int = Field(64, gt=0)


class Params(_Strict):
    llm: LLMConfig = Field(default_factory=LLMConfig)
    embedder: EmbedderConfig = Field(default_factory=EmbedderConfig)
    quality: QualityConfig = Field(default_factory=QualityConfig)
    benchmark: BenchmarkConfig = Field(default_factory=BenchmarkConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)


class ParamsError(ValueError):
    """params.yaml is missing, unreadable or invalid; the message names file and key."""


def _describe(err: ValidationError, source: str) -> str:
    lines = [f"{source}: {err.error_count()} invalid setting(s)"]
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "<root>"
        msg = "unknown key (not a setting)" if e["type"] == "extra_forbidden" else e["msg"]
        lines.append(f"  - {key}: {msg} (got {e.get('input')!r})" if e["type"] != "extra_forbidden"
                     else f"  - {key}: {msg}")
    return "\n".join(lines)


def parse_params(data: dict, source: str = "params.yaml") -> Params:
    """Validate a params mapping; raise ParamsError naming every bad key."""
    try:
        return Params.model_validate(data or {})
    except ValidationError as err:
        raise ParamsError(_describe(err, source)) from None


def load_params(path: str | Path = "params.yaml") -> Params:
    path = Path(path)
    if not path.exists():
        raise ParamsError(f"{path}: file not found (run from the repo root or set CLARIFY_PARAMS)")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ParamsError(f"{path}: not valid YAML: {err}") from None
    if data is not None and not isinstance(data, dict):
        raise ParamsError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return parse_params(data, str(path))
