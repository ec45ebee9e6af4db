"""OpenAIBackend (llm/client.py) against a fake OpenAI-compatible server on 127.0.0.1.

The server is starlette + uvicorn in a background thread; it records every request body and header,
counts concurrent in-flight requests, and answers with scripted statuses.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from dagster_project.config import RoleConfig, parse_params
from dagster_project.llm.backends.base import Job
from dagster_project.llm.backends.openai import (
    Endpoint,
    OpenAIBackend,
    _transient_errors,
    retry_after_s,
    status_error,
)
from dagster_project.llm.chat import ChatRequest, sample_cache_key
from dagster_project.llm.client import LLMClient
from dagster_project.llm.identity import cache_identity


@dataclass
class FakeOpenAI:
    url: str = ""
    requests: list[dict] = field(default_factory=list)  # {"body", "headers"}
    plan: dict[str, list[int]] = field(default_factory=dict)  # prompt -> statuses to answer first
    delay_s: float = 0.0
    slow_s: float = 0.0  # extra delay for prompts starting with "slow"
    inflight: int = 0
    max_inflight: int = 0
    events: list[tuple[str, str]] = field(default_factory=list)  # ("start" | "end", prompt), in order

    def reset(self) -> None:
        self.requests.clear()
        self.plan.clear()
        self.events.clear()
        self.delay_s, self.slow_s, self.inflight, self.max_inflight = 0.0, 0.0, 0, 0

    async def completions(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.requests.append({"body": body, "headers": dict(request.headers)})
        prompt = body["messages"][-1]["content"]
        self.events.append(("start", prompt))
        self.inflight += 1  # one event loop thread: no lock needed
        self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            if self.slow_s and prompt.startswith("slow"):
                await asyncio.sleep(self.slow_s)
        finally:
            self.inflight -= 1
            self.events.append(("end", prompt))
        statuses = self.plan.get(prompt)
        status = statuses.pop(0) if statuses else 200
        if prompt.startswith("always-400"):
            status = 400
        if status != 200:
            return JSONResponse({"error": {"message": f"scripted {status} for {prompt}", "type": "invalid_request_error",
                                           "code": None, "param": None}}, status_code=status)
        n = body.get("n") or 1
        return JSONResponse({
            "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()), "model": body["model"],
            "choices": [{"index": i, "finish_reason": "stop", "logprobs": None,
                         "message": {"role": "assistant", "content": f"{prompt}|seed={body.get('seed')}|{i}"}}
                        for i in range(n)],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3 * n, "total_tokens": 7 + 3 * n},
        })


@pytest.fixture(scope="module")
def server():
    fake = FakeOpenAI()
    app = Starlette(routes=[Route("/v1/chat/completions", fake.completions, methods=["POST"])])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started:
        assert thread.is_alive() and time.monotonic() < deadline, "fake OpenAI server did not start"
        time.sleep(0.02)
    fake.url = f"http://127.0.0.1:{port}/v1"
    yield fake
    srv.should_exit = True
    thread.join(timeout=10)
    sock.close()


@pytest.fixture
def fake(server, monkeypatch):
    server.reset()
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("CLARIFY_FAKE_KEY", "sk-fake-from-env-42")
    return server


def role(fake: FakeOpenAI, **kw) -> RoleConfig:
    base = {"backend": "openai", "model": "fake-model", "base_url": fake.url, "api_key_env": "CLARIFY_FAKE_KEY",
            "timeout_s": 10.0, "max_retries": 2, "concurrency": 4, "seed": 100}
    return RoleConfig(**{**base, **kw})


def job(prompt: str, indices=(0,), schema=None) -> Job:
    return Job(messages=({"role": "user", "content": prompt},),
               sampling={"temperature": 0.5, "top_p": 0.9, "max_tokens": 32, "seed": 100},
               sample_indices=list(indices), json_schema=schema)


def test_n_samples_in_one_request_with_usage(fake):
    backend = OpenAIBackend(role(fake))
    [three, tail] = backend.generate([job("hello", [0, 1, 2]), job("again", [1, 2])])

    assert three.error is None
    assert three.texts == ["hello|seed=100|0", "hello|seed=100|1", "hello|seed=100|2"]
    assert (three.tokens_in, three.tokens_out) == (7, 9)
    # only the missing samples are asked for, seeded from the first missing index
    assert tail.texts == ["again|seed=101|0", "again|seed=101|1"]
    bodies = {r["body"]["messages"][-1]["content"]: r["body"] for r in fake.requests}
    assert len(fake.requests) == 2
    assert bodies["hello"]["n"] == 3 and bodies["again"]["n"] == 2
    assert bodies["hello"]["model"] == "fake-model"
    assert (bodies["hello"]["temperature"], bodies["hello"]["top_p"], bodies["hello"]["max_tokens"]) == (0.5, 0.9, 32)
    assert "response_format" not in bodies["hello"]


def test_json_schema_is_passed_as_response_format(fake):
    schema = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 50}},
              "required": ["answer"], "additionalProperties": False}
    [out] = OpenAIBackend(role(fake)).generate([job("structured", schema=schema)])
    assert out.error is None
    [sent] = fake.requests
    rf = sent["body"]["response_format"]
    assert rf["type"] == "json_schema"
    assert rf["json_schema"]["schema"] == schema
    assert rf["json_schema"]["name"]


def test_concurrency_limit_is_honoured(fake):
    fake.delay_s = 0.1
    outs = OpenAIBackend(role(fake, concurrency=2)).generate([job(f"c{i}") for i in range(10)])
    assert [o.texts for o in outs] == [[f"c{i}|seed=100|0"] for i in range(10)]
    assert len(fake.requests) == 10
    assert 1 < fake.max_inflight <= 2


def test_transient_500_is_retried(fake):
    fake.plan["flaky"] = [500]
    [out, other] = OpenAIBackend(role(fake, max_retries=1)).generate([job("flaky", [0, 1]), job("steady")])
    assert out.error is None
    assert out.texts == ["flaky|seed=100|0", "flaky|seed=100|1"]
    assert other.error is None
    prompts = [r["body"]["messages"][-1]["content"] for r in fake.requests]
    assert prompts.count("flaky") == 2 and prompts.count("steady") == 1


def test_transient_failures_outliving_the_retries_cost_max_retries_plus_one_tries(fake):
    """The first try runs outside tenacity; its failure is attempt 1 of tenacity's loop, so the waits follow
    attempts 1, 2 and the job gives up after max_retries + 1 tries, the retries counted."""
    fake.plan["down"] = [503] * 5
    fake.plan["recovers"] = [503, 503]
    backend = OpenAIBackend(role(fake, max_retries=2))
    backend.backoff_initial_s = backend.backoff_max_s = 0.01
    slept_after: list[int] = []  # the attempt each backoff sleep followed
    inner = backend._count_retry
    backend._count_retry = lambda state: (slept_after.append(state.attempt_number), inner(state))[1]  # type: ignore
    [down] = backend.generate([job("down")])
    assert down.texts == [] and "InternalServerError" in down.error and "503" in down.error
    assert (slept_after, backend.retries) == ([1, 2], 2)
    [ok] = backend.generate([job("recovers")])
    assert ok.error is None and ok.texts == ["recovers|seed=100|0"]
    prompts = [r["body"]["messages"][-1]["content"] for r in fake.requests]
    assert (prompts.count("down"), prompts.count("recovers"), backend.retries) == (3, 3, 4)
    fake.plan["once"] = [503]
    [no_retry] = OpenAIBackend(role(fake, max_retries=0)).generate([job("once")])
    assert "503" in no_retry.error and [r["body"]["messages"][-1]["content"] for r in fake.requests].count("once") == 1


def test_timeouts_and_refused_connections_are_retried_then_become_the_sdks_errors(fake):
    fake.slow_s = 2.0
    backend = OpenAIBackend(role(fake, max_retries=1, timeout_s=0.3))
    backend.backoff_initial_s = backend.backoff_max_s = 0.01
    [slow, quick] = backend.generate([job("slow one"), job("quick")])
    assert slow.error == "APITimeoutError: Request timed out." and quick.texts == ["quick|seed=100|0"]
    assert [r["body"]["messages"][-1]["content"] for r in fake.requests].count("slow one") == 2
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    refused = OpenAIBackend(RoleConfig(backend="openai", model="m", base_url=closed, max_retries=1, timeout_s=5))
    refused.backoff_initial_s = refused.backoff_max_s = 0.01
    [out] = refused.generate([job("anyone?")])
    assert out.error == "APIConnectionError: Connection error." and refused.retries == 1


def test_requests_go_through_the_environments_proxy_unless_no_proxy_names_the_host(fake, monkeypatch):
    from faultproxy import FaultProxy

    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy",
                "no_proxy"):
        monkeypatch.delenv(var, raising=False)
    with FaultProxy(fake.url.removesuffix("/v1")) as proxy:
        monkeypatch.setenv("http_proxy", f"http://user:secret@127.0.0.1:{proxy.port}")
        monkeypatch.setenv("no_proxy", "internal.invalid")
        backend = OpenAIBackend(RoleConfig(backend="openai", model="fake-model", base_url="http://api.clarify.invalid/v1",
                                           max_retries=0, timeout_s=10))
        [out] = backend.generate([job("via the proxy")])
        assert out.error is None and out.texts == ["via the proxy|seed=100|0"]
        assert proxy.proxied_hosts == ["api.clarify.invalid"]
        endpoint = Endpoint("http://api.clarify.invalid/v1/chat/completions")
        assert (str(endpoint.proxy), endpoint.proxy_auth.login) == (f"http://127.0.0.1:{proxy.port}", "user")
        assert Endpoint("http://internal.invalid/v1/chat/completions").proxy is None


def test_status_errors_are_the_sdks_classes_and_messages():
    import openai

    err = status_error("http://h/v1/chat/completions", 429, {"Retry-After": "3", "x-request-id": "req-1"},
                       b'{"error": {"message": "slow down", "type": "rate_limit"}}')
    assert isinstance(err, openai.RateLimitError) and str(err) == "Error code: 429 - slow down"
    assert err.body == {"message": "slow down", "type": "rate_limit"} and err.request_id == "req-1"
    assert retry_after_s(err) == 3.0 and isinstance(err, _transient_errors())
    html = status_error("http://h/v1/chat/completions", 502, {}, b"<html>bad gateway</html>")
    assert type(html) is openai.InternalServerError and str(html) == "Error code: 502" and html.status_code == 502
    assert type(status_error("u", 418, {}, b"")) is openai.APIStatusError
    assert not isinstance(status_error("u", 400, {}, b"{}"), _transient_errors())


def test_persistent_400_becomes_job_error_not_exception(fake):
    outs = OpenAIBackend(role(fake, max_retries=3)).generate([job("fine"), job("always-400 please"), job("fine 2")])
    assert outs[0].error is None and outs[2].error is None
    err = outs[1].error
    assert err is not None and "BadRequest" in err and "400" in err
    assert outs[1].texts == []
    prompts = [r["body"]["messages"][-1]["content"] for r in fake.requests]
    assert prompts.count("always-400 please") == 1  # a 400 is not transient: no retry


def test_authorization_header_uses_key_from_env(fake):
    OpenAIBackend(role(fake)).generate([job("auth")])
    [sent] = fake.requests
    assert sent["headers"]["authorization"] == "Bearer sk-fake-from-env-42"


def test_missing_key_env_var_raises_naming_it(fake, monkeypatch):
    monkeypatch.delenv("CLARIFY_MISSING_KEY_VAR", raising=False)
    with pytest.raises(RuntimeError, match="CLARIFY_MISSING_KEY_VAR"):
        OpenAIBackend(role(fake, api_key_env="CLARIFY_MISSING_KEY_VAR"))
    monkeypatch.setenv("CLARIFY_MISSING_KEY_VAR", "")
    with pytest.raises(RuntimeError, match="CLARIFY_MISSING_KEY_VAR"):
        OpenAIBackend(role(fake, api_key_env="CLARIFY_MISSING_KEY_VAR"))
    assert fake.requests == []


def _client(fake: FakeOpenAI, tmp_path: Path, roles: dict) -> LLMClient:
    params = parse_params({"llm": {"cache_path": str(tmp_path / "c.sqlite"),
                                   "roles": {"default": {"model": "local"}, **roles}}})
    return LLMClient(params.llm)  # the real BACKENDS table: "openai" -> OpenAIBackend


def test_llm_client_end_to_end_over_http_with_cache(fake, tmp_path):
    client = _client(fake, tmp_path, {"judge": {"backend": "openai", "model": "fake-model", "base_url": fake.url,
                                                "api_key_env": "CLARIFY_FAKE_KEY", "max_retries": 0}})
    requests = [ChatRequest.of([{"role": "user", "content": f"e2e {i}"}], "p@1", n=2) for i in range(3)]
    requests.append(ChatRequest.of([{"role": "user", "content": "always-400 e2e"}], "p@1"))
    first = client.chat("judge", requests)
    assert [r.texts for r in first[:3]] == [[f"e2e {i}|seed=0|0", f"e2e {i}|seed=0|1"] for i in range(3)]
    assert first[3].error is not None and "BadRequest" in first[3].error
    assert len(fake.requests) == 4

    fake.requests.clear()
    second = client.chat("judge", requests)
    assert all(r.cached for r in second[:3])
    assert [r["body"]["messages"][-1]["content"] for r in fake.requests] == ["always-400 e2e"]


def test_a_slow_request_does_not_hold_back_the_others_or_their_commits(fake, tmp_path):
    """Every job is in flight at once (bounded by concurrency): quick answers are sent, answered and
    committed to the cache while the slow one is still running, not after its chunk ends."""
    client = _client(fake, tmp_path, {"judge": {"backend": "openai", "model": "fake-model", "base_url": fake.url,
                                                "api_key_env": "CLARIFY_FAKE_KEY", "concurrency": 2}})
    fake.slow_s = 2.0
    requests = [ChatRequest.of([{"role": "user", "content": p}], "p@1") for p in ["slow 0", *(f"q{i}" for i in range(20))]]
    committed_while_slow_ran = []

    def progress(msg: str) -> None:
        if "generated" in msg and ("end", "slow 0") not in fake.events:
            committed_while_slow_ran.append(len(client.cache.get_many(all_keys)))

    cfg = client.config.role("judge")
    all_keys = [sample_cache_key(cache_identity(cfg), r, client.resolve(cfg, r), 0) for r in requests]
    out = client.chat("judge", requests, progress)
    assert all(r.error is None for r in out) and out[0].texts == ["slow 0|seed=0|0"]
    slow_end = fake.events.index(("end", "slow 0"))
    assert all(fake.events.index(("start", f"q{i}")) < slow_end for i in range(20))  # chunk size is 8
    assert committed_while_slow_ran and max(committed_while_slow_ran) >= 16
    assert out[0].latency_s >= fake.slow_s > max(r.latency_s for r in out[1:])


def test_each_role_uses_its_own_api_key(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("CLARIFY_KEY_ONE", "key-one")
    monkeypatch.setenv("CLARIFY_KEY_TWO", "key-two")
    shared = {"backend": "openai", "model": "fake-model", "base_url": fake.url}
    client = _client(fake, tmp_path, {"judge": {**shared, "api_key_env": "CLARIFY_KEY_ONE"},
                                      "reasoner": {**shared, "api_key_env": "CLARIFY_KEY_TWO"}})
    client.chat("judge", [ChatRequest.of([{"role": "user", "content": "for judge"}])])
    client.chat("reasoner", [ChatRequest.of([{"role": "user", "content": "for reasoner"}])])
    auth = {r["body"]["messages"][-1]["content"]: r["headers"]["authorization"] for r in fake.requests}
    assert auth == {"for judge": "Bearer key-one", "for reasoner": "Bearer key-two"}


def test_model_time_is_the_request_time_without_the_wait_for_a_free_slot(fake, tmp_path):
    """concurrency 1: the later requests wait for the earlier ones; their latency counts that wait, their
    model time (what `clarify timings` reports) only their own request."""
    client = _client(fake, tmp_path, {"judge": {"backend": "openai", "model": "fake-model", "base_url": fake.url,
                                                "api_key_env": "CLARIFY_FAKE_KEY", "concurrency": 1}})
    fake.delay_s = 0.2
    out = client.chat("judge", [ChatRequest.of([{"role": "user", "content": f"t{i}"}], "p@1") for i in range(3)])
    assert all(r.error is None and r.model_s >= fake.delay_s for r in out)
    waited = max(out, key=lambda r: r.latency_s)
    assert waited.latency_s >= waited.model_s + fake.delay_s  # it queued behind at least one other request
    assert sum(r.model_s for r in out) < sum(r.latency_s for r in out)
