"""Any OpenAI-compatible endpoint (OpenAI, vLLM serve, llama.cpp server, Ollama): async, retried, bounded."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import time
from collections.abc import Awaitable, Callable
from functools import cache
from typing import Any, TypeVar

from dagster_project.config import RoleConfig
from dagster_project.llm.backends.base import Job, JobOutput, short_error


T = TypeVar("T")


@cache
def ssl_context() -> Any:
    """The SDK's default TLS context (certifi, SSL_CERT_FILE / SSL_CERT_DIR), built once per process: loading the
    CA bundle took ~21 ms per HTTP session, i.e. per backend call (profiled at paper scale)."""
    import httpx2

    return httpx2.create_ssl_context()


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


class Endpoint:
    """A chat completions URL and the proxy the environment sets for it (HTTP(S)_PROXY / ALL_PROXY, NO_PROXY,
    credentials in the proxy URL or ~/.netrc), as aiohttp's trust_env would find it for each request."""

    def __init__(self, url: str):
        from aiohttp.helpers import get_env_proxy_for_url
        from yarl import URL

        self.url, self.proxy, self.proxy_auth = url, None, None
        try:
            self.proxy, self.proxy_auth = get_env_proxy_for_url(URL(url))
        except LookupError:  # no proxy for this scheme, or NO_PROXY covers the host
            pass


async def post_json(session: Any, endpoint: Endpoint, body: dict[str, Any]) -> Any:
    """POST a JSON body, return the parsed JSON reply; failures raise what the openai SDK raises for them
    (APITimeoutError, APIConnectionError, status errors; json.JSONDecodeError for a 2xx body that is not JSON)."""
    import aiohttp
    import openai

    url = endpoint.url
    try:
        async with session.post(url, data=json.dumps(body), proxy=endpoint.proxy,
                                proxy_auth=endpoint.proxy_auth) as resp:
            raw = await resp.read()
            status, headers = resp.status, resp.headers
    except TimeoutError as err:  # aiohttp's timeouts are TimeoutErrors (some also ClientErrors): check them first
        raise openai.APITimeoutError(request=_request(url)) from err
    except aiohttp.ClientError as err:  # refused, reset, closed early, a truncated body
        raise openai.APIConnectionError(request=_request(url)) from err
    if status >= 400:
        raise status_error(url, status, headers, raw)
    return json.loads(raw)


def _request(url: str) -> Any:
    import httpx2

    return httpx2.Request("POST", url)


_STATUS_ERRORS = {400: "BadRequestError", 401: "AuthenticationError", 403: "PermissionDeniedError",
                  404: "NotFoundError", 409: "ConflictError", 422: "UnprocessableEntityError", 429: "RateLimitError"}


def status_error(url: str, status: int, headers: Any, raw: bytes) -> Exception:
    """The openai SDK's error for an HTTP error reply: its class for the status and its message ("Error code: 429 -
    <the body's error message>"), with the response (Retry-After is read from its headers)."""
    import httpx2
    import openai

    response = httpx2.Response(status, headers=list(headers.items()), content=raw, request=_request(url))
    message, body = f"Error code: {status}", raw.decode(errors="replace").strip()
    try:
        body = json.loads(body)
    except ValueError:
        pass
    data = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(data, dict) and isinstance(data.get("message"), str) and data["message"]:
        message += f" - {data['message']}"
    name = _STATUS_ERRORS.get(status, "InternalServerError" if status >= 500 else "APIStatusError")
    return getattr(openai, name)(message, response=response, body=data)


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
        import aiohttp

        # aiohttp directly, not the openai SDK's client, and the environment's proxies looked up once per endpoint
        # instead of per request (aiohttp's trust_env asks a worker thread twice per request): 0.19-0.20 ms of
        # client CPU per call against 0.66-0.75 (A/B, 3,000 calls to the instant stub, 2026-11-28). Errors are the
        # SDK's types (status_error), so retry rules and stored errors are unchanged.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.cfg.timeout_s, sock_read=self.cfg.timeout_s)
        session = aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(
            limit=self.cfg.concurrency, ssl=ssl_context()), headers={
            "Authorization": f"Bearer {self._key}", "Content-Type": "application/json", "Accept": "application/json"})
        endpoints = [Endpoint(url.rstrip("/") + "/chat/completions") for url in self.cfg.endpoints]
        sem = asyncio.Semaphore(self.cfg.concurrency)

        async def run(i: int, job: Job) -> None:
            t = time.monotonic()
            out = await self._one(session, endpoints, sem, job)
            out.latency_s = time.monotonic() - t
            on_done(i, out)

        try:
            await asyncio.gather(*(run(i, j) for i, j in enumerate(jobs)))
        finally:
            await session.close()

    def _wait(self, state: Any) -> float:
        from tenacity import wait_exponential_jitter

        backoff = wait_exponential_jitter(initial=self.backoff_initial_s, max=self.backoff_max_s)(state)
        err = state.outcome.exception() if state.outcome is not None else None
        return max(backoff, retry_after_s(err))

    def _count_retry(self, state: Any) -> None:
        self.retries += 1

    async def _one(self, session: Any, endpoints: list[Endpoint], sem: asyncio.Semaphore, job: Job) -> JobOutput:
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

        async def send() -> tuple[dict[str, Any], list[dict[str, Any]]]:
            """One try on the next server: the reply and its choices (BadReply for an unusable body)."""
            async with sem:
                endpoint = endpoints[next(servers) % len(endpoints)]
                t = time.monotonic()
                try:
                    r = await post_json(session, endpoint, kwargs)
                finally:  # the request time, failed tries included; not the slot wait or backoff
                    out.model_s = (out.model_s or 0.0) + time.monotonic() - t
            return r, _choices(r)

        try:
            while len(out.texts) < len(job.sample_indices):
                kwargs["n"] = len(job.sample_indices) - len(out.texts)
                # the next missing sample's seed: a server that ignores n is asked again with a new seed
                kwargs["seed"] = job.sampling["seed"] + job.sample_indices[len(out.texts)]
                try:  # the first try outside tenacity: its per-attempt bookkeeping was ~4% of a paper-scale run
                    r, choices = await send()
                except _transient_errors() as err:
                    r, choices = await self._retried(send, err)
                for c in choices[: kwargs["n"]]:
                    out.texts.append((c.get("message") or {}).get("content") or "")
                    out.truncated.append(c.get("finish_reason") == "length")
                usage = r.get("usage") or {}
                out.tokens_in += usage.get("prompt_tokens") or 0
                out.tokens_out += usage.get("completion_tokens") or 0
        except Exception as err:  # noqa: BLE001
            return JobOutput(error=short_error(err), model_s=out.model_s)
        return out

    async def _retried(self, send: Callable[[], Awaitable[T]], first: BaseException) -> T:
        """Tenacity's retry loop after a first try that failed with `first`: that failure is its attempt 1
        (replayed, not re-sent), so waits, Retry-After and the max_retries + 1 attempts are as if it ran them all."""
        from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt

        failed = [first]
        async for attempt in AsyncRetrying(retry=retry_if_exception_type(_transient_errors()), reraise=True,
                                           stop=stop_after_attempt(self.cfg.max_retries + 1), wait=self._wait,
                                           before_sleep=self._count_retry):
            with attempt:
                if failed:
                    raise failed.pop()
                return await send()
        raise AssertionError("unreachable: tenacity re-raises the last failure")  # pragma: no cover
