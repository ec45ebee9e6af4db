"""LLMClient (llm/client.py): order, cache, partial samples, errors, roles, usage, resume.

Every backend here is tests/fakes.ScriptedBackend (or a tiny variant): no model, no network.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fakes import ScriptedBackend  # tests/fakes.py, on sys.path via tests/conftest.py

from dagster_project.config import parse_params
from dagster_project.llm.backends.base import JobOutput
from dagster_project.llm.cache import LLMCache
from dagster_project.llm.chat import ChatRequest, sample_cache_key
from dagster_project.llm.client import LLMClient
from dagster_project.llm.identity import cache_identity


def echo(job, idx):
    """Reply that names the prompt and the sample index, so misplaced texts are visible."""
    return f"{job.messages[-1]['content']}#{idx}"


def req(text: str, **kw) -> ChatRequest:
    return ChatRequest.of([{"role": "system", "content": "be brief"}, {"role": "user", "content": text}], **kw)


def make_config(tmp_path: Path, roles: dict | None = None, subjects: dict | None = None, **llm):
    data = {"cache_path": str(tmp_path / "cache" / "llm.sqlite"),
            "roles": roles or {"default": {"model": "m-default"}}, **llm}
    if subjects:
        data["subjects"] = subjects
    return parse_params({"llm": data}).llm


def make_client(config, backend=None, factory_calls: list | None = None):
    backend = backend or ScriptedBackend(echo)

    def factory(cfg):
        if factory_calls is not None:
            factory_calls.append(cfg)
        return backend

    return LLMClient(config, backends={"llamacpp": factory}), backend


@pytest.fixture
def config(tmp_path):
    return make_config(tmp_path)


# --------------------------------------------------------------------------- order and cache

def test_results_follow_request_order_across_chunks_and_cache_hits(config):
    client, backend = make_client(config)
    # pre-cache every third request, so pending requests are non-contiguous and span several chunks
    client.chat("generator", [req(f"q{i}") for i in range(0, 11, 3)])
    backend.jobs.clear()

    requests = [req(f"q{i}") for i in range(11)]
    results = client.chat("generator", requests)

    assert [r.text for r in results] == [f"q{i}#0" for i in range(11)]
    assert [r.cached for r in results] == [i % 3 == 0 for i in range(11)]
    assert [j.messages[-1]["content"] for j in backend.jobs] == [f"q{i}" for i in range(11) if i % 3]
    assert all(r.ok for r in results)


def test_second_identical_chat_is_fully_cached(config):
    client, backend = make_client(config)
    requests = [req(f"q{i}", n=2, temperature=0.8) for i in range(5)]
    first = client.chat("generator", requests)
    assert len(backend.jobs) == 5
    assert not any(r.cached for r in first)
    assert all(r.cache_hits == 0 for r in first)

    backend.jobs.clear()
    second = client.chat("generator", requests)
    assert backend.jobs == []
    assert all(r.cached and r.cache_hits == 2 for r in second)
    assert [r.texts for r in second] == [r.texts for r in first] == [[f"q{i}#0", f"q{i}#1"] for i in range(5)]
    assert all(r.error is None for r in second)


def test_only_missing_sample_indices_are_regenerated(config):
    client, backend = make_client(config)
    request = req("three samples", n=3, temperature=1.0)
    role = config.role("generator")
    key1 = sample_cache_key(cache_identity(role), request, client.resolve(role, request), 1)
    LLMCache(config.cache_path).put_many([(key1, role.model, "PRECACHED-1", 4, 2)])

    [res] = client.chat("generator", [request])

    assert [j.sample_indices for j in backend.jobs] == [[0, 2]]
    assert res.texts == ["three samples#0", "PRECACHED-1", "three samples#2"]
    assert res.cache_hits == 1 and res.cached is False
    # tokens: the cached sample's (4, 2) plus the scripted backend's 10/5 per new sample
    assert (res.tokens_in, res.tokens_out) == (4 + 20, 2 + 10)

    backend.jobs.clear()
    [again] = client.chat("generator", [request])
    assert backend.jobs == []
    assert again.cached and again.cache_hits == 3 and again.texts == res.texts


def test_n1_answer_is_reused_as_sample_zero_of_n3(config):
    client, backend = make_client(config)
    client.chat("generator", [req("grow", temperature=0.7)])
    backend.jobs.clear()
    [res] = client.chat("generator", [req("grow", temperature=0.7, n=3)])
    assert [j.sample_indices for j in backend.jobs] == [[1, 2]]
    assert res.texts == ["grow#0", "grow#1", "grow#2"]


# --------------------------------------------------------------------------- failures

def test_failed_request_becomes_error_row_is_not_cached_and_is_retried(config):
    failing = {"on": True}

    def fail(job):
        return "RateLimitError: slow down" if failing["on"] and "bad" in job.messages[-1]["content"] else None

    backend = ScriptedBackend(echo, fail=fail)
    client, _ = make_client(config, backend)
    requests = [req("good-1"), req("bad"), req("good-2")]

    results = client.chat("generator", requests)  # must not raise
    assert [r.error for r in results] == [None, "RateLimitError: slow down", None]
    assert [r.ok for r in results] == [True, False, True]
    assert results[0].text == "good-1#0" and results[2].text == "good-2#0"

    role = config.role("generator")
    keys = {r.messages[-1]["content"]: sample_cache_key(cache_identity(role), r, client.resolve(role, r), 0)
            for r in requests}
    stored = LLMCache(config.cache_path).get_many(list(keys.values()))
    assert keys["bad"] not in stored
    assert keys["good-1"] in stored and keys["good-2"] in stored

    failing["on"] = False
    backend.jobs.clear()
    retry = client.chat("generator", requests)
    assert [j.messages[-1]["content"] for j in backend.jobs] == ["bad"]
    assert all(r.ok for r in retry)
    assert [r.cached for r in retry] == [True, False, True]
    assert retry[1].text == "bad#0"


def test_backend_returning_too_few_samples_is_an_error_not_a_short_result(config):
    class ShortBackend(ScriptedBackend):
        def generate(self, jobs):
            self.jobs.extend(jobs)
            return [JobOutput(texts=["only one"], tokens_in=1, tokens_out=1) for _ in jobs]

    client, _ = make_client(config, ShortBackend(echo))
    [res] = client.chat("generator", [req("two please", n=2)])
    assert res.error is not None and "1 of 2" in res.error
    role = config.role("generator")
    request = req("two please", n=2)
    keys = [sample_cache_key(cache_identity(role), request, client.resolve(role, request), i) for i in range(2)]
    assert LLMCache(config.cache_path).get_many(keys) == {}


def test_backend_factory_that_raises_fails_rows_not_the_process(config):
    ok_client, _ = make_client(config)
    ok_client.chat("generator", [req("already answered")])

    def broken(cfg):
        raise RuntimeError("no such model file")

    client = LLMClient(config, backends={"llamacpp": broken})
    messages: list[str] = []
    results = client.chat("generator", [req("new-1"), req("already answered"), req("new-2")],
                          progress=messages.append)
    assert results[1].ok and results[1].cached and results[1].text == "already answered#0"
    for r in (results[0], results[2]):
        assert r.error is not None
        assert r.error.startswith("backend unavailable")
        assert "no such model file" in r.error
    assert any("backend unavailable" in m for m in messages)


def test_backend_generate_that_raises_fails_only_that_chunk(config):
    calls = {"n": 0}

    class RaisesOnSecondChunk(ScriptedBackend):
        def generate(self, jobs):
            calls["n"] += 1
            if calls["n"] == 2:
                raise ConnectionError("socket closed")
            return super().generate(jobs)

    client, _ = make_client(config, RaisesOnSecondChunk(echo))  # chunk_size 4
    requests = [req(f"q{i}") for i in range(10)]
    results = client.chat("generator", requests)  # must not raise
    assert [r.ok for r in results] == [True] * 4 + [False] * 4 + [True] * 2
    assert all("ConnectionError" in r.error and "socket closed" in r.error for r in results[4:8])

    again_client, again_backend = make_client(config)
    again = again_client.chat("generator", requests)
    assert [j.messages[-1]["content"] for j in again_backend.jobs] == [f"q{i}" for i in range(4, 8)]
    assert all(r.ok for r in again)


def test_progress_reports_x_of_y_generated(config):
    client, backend = make_client(config)  # ScriptedBackend.chunk_size == 4
    messages: list[str] = []
    client.chat("generator", [req(f"q{i}") for i in range(10)], progress=messages.append)
    generated = [re.search(r"(\d+)/(\d+) generated", m) for m in messages]
    counts = [(int(m.group(1)), int(m.group(2))) for m in generated if m]
    assert counts == [(4, 10), (8, 10), (10, 10)]
    assert "10 requests, 0 fully cached, 10 to generate" in messages[0]

    messages.clear()
    client.chat("generator", [req(f"q{i}") for i in range(10)], progress=messages.append)
    assert not any("generated" in m for m in messages)
    assert "10 fully cached, 0 to generate" in messages[0]


# --------------------------------------------------------------------------- what is in the key

@pytest.mark.parametrize("variant", [
    {"prompt_version": "v2"},
    {"seed": 7},
    {"temperature": 0.5},
    {"max_tokens": 17},
    {"json_schema": {"type": "object", "properties": {"a": {"type": "string"}}}},
])
def test_cache_miss_when_key_input_changes(config, variant):
    client, backend = make_client(config)
    client.chat("generator", [req("same words", prompt_version="v1")])
    backend.jobs.clear()

    [same] = client.chat("generator", [req("same words", prompt_version="v1")])
    assert same.cached and backend.jobs == []

    kw = {"prompt_version": "v1", **variant}
    [other] = client.chat("generator", [req("same words", **kw)])
    assert not other.cached and other.cache_hits == 0
    assert len(backend.jobs) == 1


def test_role_seed_default_enters_the_key(tmp_path):
    a = make_config(tmp_path, roles={"default": {"model": "m", "seed": 1}})
    b = make_config(tmp_path, roles={"default": {"model": "m", "seed": 2}})
    client_a, _ = make_client(a)
    client_a.chat("generator", [req("x")])
    client_b, backend_b = make_client(b)
    [res] = client_b.chat("generator", [req("x")])
    assert not res.cached and len(backend_b.jobs) == 1
    assert backend_b.jobs[0].sampling["seed"] == 2


# --------------------------------------------------------------------------- roles

def test_role_fallback_subjects_and_sampling_defaults(tmp_path):
    config = make_config(
        tmp_path,
        roles={"default": {"model": "m-default", "temperature": 0.3, "max_tokens": 99},
               "judge": {"model": "m-judge"}},
        subjects={"tiny": {"model": "m-tiny"}, "other": {"model": "m-other"}},
    )
    built: list = []
    client, backend = make_client(config, factory_calls=built)

    [gen] = client.chat("generator", [req("g")])
    [jud] = client.chat("judge", [req("j")])
    [sub] = client.chat("subject:tiny", [req("s")])
    assert (gen.model, jud.model, sub.model) == ("m-default", "m-judge", "m-tiny")
    assert [c.model for c in built] == ["m-default", "m-judge", "m-tiny"]
    # role defaults resolve unset sampling, request values win
    assert backend.jobs[0].sampling == {"temperature": 0.3, "top_p": 1.0, "max_tokens": 99, "seed": 0}
    [_] = client.chat("reasoner", [req("override", temperature=1.2, top_p=0.5, max_tokens=5, seed=3)])
    assert backend.jobs[-1].sampling == {"temperature": 1.2, "top_p": 0.5, "max_tokens": 5, "seed": 3}

    # an unset role shares the default's model, so it shares its cache entries
    backend.jobs.clear()
    [shared] = client.chat("clarifier", [req("g")])
    assert shared.cached and backend.jobs == []
    # ... but a role with another model does not
    [judged] = client.chat("judge", [req("g")])
    assert not judged.cached and len(backend.jobs) == 1

    with pytest.raises(KeyError, match="nope"):
        client.chat("subject:nope", [req("s")])


# --------------------------------------------------------------------------- accounting

def test_usage_sums_tokens_and_counts_hits(tmp_path):
    config = make_config(tmp_path, roles={"default": {"model": "m", "price_in_per_mtok": 1000.0,
                                                      "price_out_per_mtok": 2000.0}})
    client, _ = make_client(config)
    requests = [req(f"q{i}", n=2) for i in range(3)]
    first = client.usage("generator", client.chat("generator", requests))
    assert first["llm/generator/requests"] == 3 and first["llm/generator/samples"] == 6
    assert first["llm/generator/cache_hits"] == 0 and first["llm/generator/new_calls"] == 6
    assert (first["llm/generator/tokens_in"], first["llm/generator/tokens_out"]) == (60, 30)
    assert first["llm/generator/errors"] == 0
    assert first["llm/generator/est_cost_usd"] == pytest.approx((60 * 1000 + 30 * 2000) / 1e6)

    second = client.usage("generator", client.chat("generator", requests + [req("fresh")]))
    assert second["llm/generator/requests"] == 4 and second["llm/generator/samples"] == 7
    assert second["llm/generator/cache_hits"] == 6 and second["llm/generator/new_calls"] == 1
    assert (second["llm/generator/tokens_in"], second["llm/generator/tokens_out"]) == (70, 35)


# --------------------------------------------------------------------------- resume

class Killed(BaseException):
    """Stands in for SIGKILL / Ctrl-C in the middle of a batch."""


def test_new_client_on_same_path_resumes_after_a_kill(config):
    calls = {"n": 0}

    class DiesOnSecondChunk(ScriptedBackend):
        def generate(self, jobs):
            calls["n"] += 1
            if calls["n"] == 2:
                raise Killed()
            return super().generate(jobs)

    requests = [req(f"q{i}") for i in range(10)]
    client1, _ = make_client(config, DiesOnSecondChunk(echo))
    with pytest.raises(Killed):
        client1.chat("generator", requests)

    client2, backend2 = make_client(config)  # a new process would build a new client on the same file
    results = client2.chat("generator", requests)
    # chunk 1 (4 requests) survived the kill; only the rest is paid for again
    assert [j.messages[-1]["content"] for j in backend2.jobs] == [f"q{i}" for i in range(4, 10)]
    assert [r.cached for r in results] == [True] * 4 + [False] * 6
    assert [r.text for r in results] == [f"q{i}#0" for i in range(10)]

    client3, backend3 = make_client(config)
    assert all(r.cached for r in client3.chat("generator", requests))
    assert backend3.jobs == []
