"""params.yaml `llm` (roles, subjects, cache), `embedder` and `quality`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from dagster_project.config.base import Strict
from dagster_project.config.home import home_path

TRAINED_BACKENDS = ("llamacpp", "transformers", "vllm")  # the backends that serve `training/<name>` models

Quantize = Literal["q8_0", "q4_0"]  # llama.cpp file types a llamacpp role may re-encode its GGUF to


class RoleConfig(Strict):
    """One model behind a role: which backend, which model, and its sampling defaults."""

    backend: Literal["llamacpp", "openai", "vllm", "transformers"] = "llamacpp"
    model: str = "smollm2-135m-instruct"
    base_url: str | None = None
    # openai backend: a pool of servers of the same model (vLLM on several GPUs), used round-robin per request
    # (a retried request goes to the next server); instead of base_url. Cache keys name the whole pool, so set
    # cache_namespace to keep them when the pool grows or shrinks.
    base_urls: list[str] = Field(default_factory=list)
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
    # llamacpp: a call's requests decoded side by side, each context on n_threads / parallel threads, each given a
    # fixed share (a token's decode reads every weight, so two streams use the memory bus better than two threads
    # on one: 1.35x on 2 cores, docs/backends.md). Default: 2 when there are 2 threads or more, else 1
    parallel: int | None = Field(None, ge=1)
    # llamacpp: run the GGUF re-encoded by llama.cpp's quantizer (made once into the models folder). q8_0 turns the
    # embedded Q4_1 file into one whose prompt processing is ~1.5x faster on x86 CPUs (docs/backends.md)
    quantize: Quantize | None = None
    # llamacpp: KV states of earlier prompts kept to reuse shared prefixes across interleaved calls (0: off)
    prefix_cache_mb: int = Field(256, ge=0)
    # vllm: passed to vllm.LLM; transformers: device (auto | cpu | cuda), dtype (float32 | bfloat16 | float16), batch_size
    engine_kwargs: dict[str, object] = Field(default_factory=dict)
    # openai backend: how a JSON schema is sent. "json_schema" is OpenAI's / vLLM's format;
    # "json_object" sends {"type": "json_object", "schema": ...} (llama-cpp-python's server).
    json_format: Literal["json_schema", "json_object"] = "json_schema"
    price_in_per_mtok: float = Field(0.0, ge=0.0)
    price_out_per_mtok: float = Field(0.0, ge=0.0)
    # Cache identity: by default replies are shared only with the same backend + model at the same endpoint
    # (openai: base_url; llamacpp / local vllm: the model file's fingerprint). Roles that name the same
    # cache_namespace (and model) share replies deliberately, whatever their URL or file (llm/identity.py).
    cache_namespace: str | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _openai_needs_endpoint(self) -> RoleConfig:
        if self.base_url and self.base_urls:
            raise ValueError("set base_url (one server) or base_urls (a pool), not both")
        if self.backend == "openai" and not self.endpoints:
            raise ValueError("backend 'openai' needs base_url (e.g. https://api.openai.com/v1) or base_urls")
        if self.model.startswith("training/") and self.backend not in TRAINED_BACKENDS:
            raise ValueError(f"model {self.model!r} (a trained model) needs backend "
                             f"{' / '.join(map(repr, TRAINED_BACKENDS))}, got {self.backend!r}")
        return self

    @property
    def endpoints(self) -> list[str]:
        """The servers behind this role: base_urls, or [base_url], or none (a local backend)."""
        return list(self.base_urls) or ([self.base_url] if self.base_url else [])



def trained_role(reference: RoleConfig | None, model: str) -> RoleConfig:
    """A role serving the trained `model` the way `reference` (its training base, evaluation.trained_baseline) is
    served: the same settings and backend when that backend serves trained models, else on transformers."""
    ref = reference or RoleConfig(backend="transformers")
    backend = ref.backend if ref.backend in TRAINED_BACKENDS else "transformers"
    return ref.model_copy(update={"backend": backend, "model": model})


ROLE_NAMES = (
    "generator", "extractor", "reasoner", "user_simulator", "judge",
    "answerer", "clarifier", "assistant", "reranker",
    "label_simulator", "eval_simulator",  # double_turn: users that label preferences / that evaluate (paper: different)
)


class LLMConfig(Strict):
    # A relative path lies below CLARIFY_HOME (default: the DVC project root, shared by `dvc exp run --temp`
    # workspaces; config/home.py), not below the working directory; stored resolved (absolute).
    cache_path: str = Field(".cache/llm_cache.sqlite", validate_default=True)
    # Concurrent runs: a process claims the uncached keys it is about to send for claim_lease_s seconds
    # (renewed while it works); another run waits for those replies, polling every claim_poll_s, and takes
    # over a claim whose lease ran out (its owner was killed).
    claim_lease_s: float = Field(60.0, gt=0)
    claim_poll_s: float = Field(0.5, gt=0)
    roles: dict[str, RoleConfig] = Field(default_factory=lambda: {"default": RoleConfig()})
    subjects: dict[str, RoleConfig] = Field(default_factory=lambda: {"smollm2": RoleConfig()})

    @field_validator("cache_path", mode="after")
    @classmethod
    def _resolve_cache_path(cls, v: str) -> str:
        return str(home_path(v))

    @model_validator(mode="after")
    def _known_roles(self) -> LLMConfig:
        if "default" not in self.roles:
            raise ValueError("llm.roles must define 'default' (the fallback for unset roles)")
        # "<role>:<name>" is a second model for one role (e.g. generator:deepseek, benchmark.generators)
        unknown = {r for r in self.roles if r != "default" and r.split(":", 1)[0] not in ROLE_NAMES}
        if unknown:
            raise ValueError(f"unknown role(s) {sorted(unknown)}; known roles: {['default', *ROLE_NAMES]} "
                             "(each may be named <role>:<name> for a second model)")
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
        return self.roles.get(name) or self.roles.get(name.split(":", 1)[0]) or self.roles["default"]


class EmbedderConfig(Strict):
    model: str = "all-MiniLM-L6-v2"
    batch_size: int = Field(64, gt=0)
    # Embeddings and BERTScore-F1 by content hash (llm/vector_cache.py), so a rerun skips MiniLM; null: off.
    # Relative paths lie below CLARIFY_HOME, as llm.cache_path.
    cache_path: str | None = ".cache/embeddings.sqlite"

    @field_validator("cache_path", mode="after")
    @classmethod
    def _resolve_cache_path(cls, v: str | None) -> str | None:
        return None if v is None else str(home_path(v))


class QualityConfig(Strict):
    max_error_rate: float = Field(0.2, ge=0.0, le=1.0)
