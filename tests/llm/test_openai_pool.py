"""A role served by a pool of OpenAI-compatible servers (llm.roles.<role>.base_urls): round-robin per request,
failover on retry, one cache identity for the pool (stable across pools with cache_namespace)."""

from __future__ import annotations

import socket

import pytest
from openai_stub import running_stub

from dagster_project.config import ParamsError, RoleConfig, parse_params
from dagster_project.llm.backends.base import Job
from dagster_project.llm.backends.openai import OpenAIBackend
from dagster_project.llm.chat import ChatRequest
from dagster_project.llm.client import LLMClient
from dagster_project.llm.identity import cache_identity


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


def _job(prompt: str) -> Job:
    return Job(messages=({"role": "user", "content": prompt},),
               sampling={"temperature": 0.0, "top_p": 1.0, "max_tokens": 16, "seed": 0}, sample_indices=[0], json_schema=None)


def _dead_url() -> str:
    """A loopback port nobody listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def test_base_url_or_base_urls_is_required_and_not_both():
    with pytest.raises(ParamsError, match="needs base_url"):
        parse_params({"llm": {"roles": {"default": {"backend": "openai", "model": "m"}}}})
    with pytest.raises(ParamsError, match="not both"):
        parse_params({"llm": {"roles": {"default": {"backend": "openai", "model": "m", "base_url": "http://a/v1",
                                                    "base_urls": ["http://b/v1"]}}}})
    role = RoleConfig(backend="openai", model="m", base_urls=["http://a/v1", "http://b/v1"])
    assert role.endpoints == ["http://a/v1", "http://b/v1"]


def test_requests_go_round_robin_over_the_pool():
    with running_stub() as a, running_stub() as b:
        backend = OpenAIBackend(RoleConfig(backend="openai", model="m", base_urls=[a.url, b.url], concurrency=3))
        outs = backend.generate([_job(f"q{i}") for i in range(10)])
    assert all(o.error is None and o.texts for o in outs)
    assert (len(a.requests), len(b.requests)) == (5, 5)
    assert sorted(r["messages"][0]["content"] for r in a.requests + b.requests) == sorted(f"q{i}" for i in range(10))


def test_a_retried_request_goes_to_the_next_server():
    with running_stub() as live:
        backend = OpenAIBackend(RoleConfig(backend="openai", model="m", base_urls=[_dead_url(), live.url],
                                           concurrency=1, max_retries=1, timeout_s=5))
        backend.backoff_initial_s = backend.backoff_max_s = 0.01
        outs = backend.generate([_job(f"q{i}") for i in range(4)])
    assert [o.error for o in outs] == [None] * 4 and len(live.requests) == 4
    assert backend.retries == 2  # jobs 0 and 2 started on the dead server; each retry went to the live one


def test_the_pool_is_one_cache_identity_and_a_namespace_survives_a_new_pool(tmp_path):
    a = cache_identity(RoleConfig(backend="openai", model="m", base_urls=["http://A:8000/v1/", "http://b:8000/v1"]))
    b = cache_identity(RoleConfig(backend="openai", model="m", base_urls=["http://b:8000/v1", "http://a:8000/v1"]))
    one = cache_identity(RoleConfig(backend="openai", model="m", base_urls=["http://a:8000/v1"]))
    assert a == b != one == cache_identity(RoleConfig(backend="openai", model="m", base_url="http://a:8000/v1"))

    requests = [ChatRequest.of([{"role": "user", "content": f"q{i}"}], "p@1") for i in range(6)]
    with running_stub() as s1, running_stub() as s2, running_stub() as s3:
        def client(urls: list[str]) -> LLMClient:
            return LLMClient(parse_params({"llm": {"cache_path": str(tmp_path / "c.sqlite"), "roles": {"default": {
                "backend": "openai", "model": "m", "base_urls": urls, "cache_namespace": "m-pool"}}}}).llm)

        first = client([s1.url, s2.url]).chat("judge", requests)
        again = client([s3.url]).chat("judge", requests)  # another pool, same namespace: every reply cached
    assert all(r.ok for r in first) and len(s1.requests) + len(s2.requests) == 6
    assert all(r.cached for r in again) and s3.requests == []
    assert [r.texts for r in again] == [r.texts for r in first]
