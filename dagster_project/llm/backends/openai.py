"""Any OpenAI-compatible endpoint (OpenAI, vLLM serve, llama.cpp server, Ollama): async, retried, bounded."""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import Callable
from typing import Any

from dagster_project.config import RoleConfig
from dagster_project.llm.backends.base import Job, JobOutput, short_error


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


def _choices(reply: Any) -> list[dict[str, Any]]:
    """The choices of a chat completion body; BadReply (retried) for anything else or none."""
    if not isinstance(reply, dict) or not isinstance(reply.get("choices"), list):
        raise BadReply(f"reply is not a chat completion: {str(reply)[:200]!r}")
    if not reply["choices"]:
        raise BadReply("server returned no choices")
    if not all(isinstance(c, dict) for c in reply["choices"]):
        raise BadReply(f"choices are not objects: {str(reply['choices'])[:200]!r}")
    return reply["choices"]


class OpenAIBackend:
    """Any OpenAI-compatible server; async with a concurrency limit, retries with backoff, timeouts.

    Transient failures (connection errors, timeouts, 429 honouring Retry-After, 5xx, truncated or non-JSON
    bodies, replies without choices) are retried up to max_retries times with exponential backoff + jitter;
    anything else, or a transient failure that outlives its retries, becomes that job's error.
    Servers that ignore `n` (llama.cpp's) are asked again for the missing samples, each with its own seed.
    A pool (base_urls) is used round-robin, one server per job, each retry on the next server; `concurrency`
    bounds the whole pool.
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
        self._turn = itertools.count()  # round-robin over the role's servers, one step per job

    def generate(self, jobs: list[Job]) -> list[JobOutput]:
        outs: list[JobOutput] = [JobOutput() for _ in jobs]
        self.generate_each(jobs, outs.__setitem__)
        return outs

    def generate_each(self, jobs: list[Job], on_done: Callable[[int, JobOutput], None]) -> None:
        """All jobs in flight at once (at most `concurrency` requests open); on_done(i, output) as each ends."""
        asyncio.run(self._all(jobs, on_done))

    async def _all(self, jobs: list[Job], on_done: Callable[[int, JobOutput], None]) -> None:
        from openai import AsyncOpenAI, DefaultAioHttpClient

        # the aiohttp transport (openai[aiohttp]) costs ~0.67 ms of client CPU per call against httpx's ~1.26
        # (A/B, 3,000 calls to the instant stub); errors still surface as the SDK's types, proxies from the env
        clients = [AsyncOpenAI(base_url=url, api_key=self._key, timeout=self.cfg.timeout_s, max_retries=0,
                               http_client=DefaultAioHttpClient(timeout=self.cfg.timeout_s))
                   for url in self.cfg.endpoints]
        sem = asyncio.Semaphore(self.cfg.concurrency)

        async def run(i: int, job: Job) -> None:
            t = time.monotonic()
            out = await self._one(clients, sem, job)
            out.latency_s = time.monotonic() - t
            on_done(i, out)

        try:
            await asyncio.gather(*(run(i, j) for i, j in enumerate(jobs)))
        finally:
            for client in clients:
                await client.close()

    def _wait(self, state: Any) -> float:
        from tenacity import wait_exponential_jitter

        backoff = wait_exponential_jitter(initial=self.backoff_initial_s, max=self.backoff_max_s)(state)
        err = state.outcome.exception() if state.outcome is not None else None
        return max(backoff, retry_after_s(err))

    def _count_retry(self, state: Any) -> None:
        self.retries += 1

    async def _one(self, clients: list[Any], sem: asyncio.Semaphore, job: Job) -> JobOutput:
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
        servers = itertools.count(next(self._turn))  # this job's server, then the next one for each retry
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
                            # the raw JSON: the client's typed request transform and response models cost
                            # ~1-3 ms of CPU per call (profiled at paper scale), more than the rest of the layer
                            client = clients[next(servers) % len(clients)]
                            t = time.monotonic()
                            try:
                                r = await client.post("/chat/completions", body=kwargs, cast_to=object)
                            finally:  # the request time, failed tries included; not the slot wait or backoff
                                out.model_s = (out.model_s or 0.0) + time.monotonic() - t
                        choices = _choices(r)
                for c in choices[: kwargs["n"]]:
                    out.texts.append((c.get("message") or {}).get("content") or "")
                    out.truncated.append(c.get("finish_reason") == "length")
                usage = r.get("usage") or {}
                out.tokens_in += usage.get("prompt_tokens") or 0
                out.tokens_out += usage.get("completion_tokens") or 0
        except Exception as err:  # noqa: BLE001
            return JobOutput(error=short_error(err), model_s=out.model_s)
        return out

