"""Cache keys and usage accounting (chat.py)."""

import pytest

from dagster_project.config import RoleConfig
from dagster_project.llm.chat import (
    ChatRequest,
    ChatResult,
    parse_usage_key,
    sample_cache_key,
    usage_key,
    usage_summary,
)
from dagster_project.llm.identity import cache_identity

MSGS = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
RESOLVED = {"temperature": 0.7, "top_p": 1.0, "max_tokens": 64, "seed": 0}
IDENT = cache_identity(RoleConfig(backend="vllm", model="m1"))


def key(identity=IDENT, request=None, resolved=RESOLVED, index=0):
    return sample_cache_key(identity, request or ChatRequest.of(MSGS, "p@abc"), resolved, index)


def test_same_inputs_same_key():
    assert key() == key()
    assert len(key()) == 64
    # a structurally equal request built separately
    assert key(request=ChatRequest.of([dict(m) for m in MSGS], "p@abc")) == key()


def test_key_changes_with_each_input():
    base = key()
    variants = [
        key(index=1),
        key(resolved={**RESOLVED, "seed": 1}),
        key(resolved={**RESOLVED, "temperature": 0.0}),
        key(request=ChatRequest.of(MSGS[:1] + [{"role": "user", "content": "hi!"}], "p@abc")),
        key(request=ChatRequest.of(MSGS[1:], "p@abc")),
        key(request=ChatRequest.of(MSGS, "p@abc", json_schema={"type": "object"})),
        key(request=ChatRequest.of(MSGS, "p@abd")),
        key(identity=cache_identity(RoleConfig(backend="vllm", model="m2"))),
        key(identity=cache_identity(RoleConfig(backend="llamacpp", model="m1"))),
    ]
    assert all(v != base for v in variants)
    assert len(set(variants)) == len(variants)


def test_schema_and_resolved_key_order_does_not_matter():
    a = key(request=ChatRequest.of(MSGS, "p", json_schema={"a": 1, "b": 2}))
    b = key(request=ChatRequest.of(MSGS, "p", json_schema={"b": 2, "a": 1}))
    assert a == b
    assert key(resolved=dict(reversed(list(RESOLVED.items())))) == key()


def test_key_and_timeouts_do_not_change_key_but_the_endpoint_does():
    r1 = RoleConfig(backend="openai", model="gpt-x", base_url="https://a.example/v1", api_key_env="A_KEY",
                    timeout_s=10, max_retries=1, concurrency=2)
    same = RoleConfig(backend="openai", model="gpt-x", base_url="https://A.example/v1/", api_key_env="B_KEY",
                      timeout_s=300, max_retries=5, concurrency=64)
    other = RoleConfig(backend="openai", model="gpt-x", base_url="http://localhost:8000/v1", api_key_env="A_KEY")
    assert cache_identity(r1) == cache_identity(same) == {"backend": "openai", "model": "gpt-x",
                                                          "endpoint": "https://a.example/v1"}
    assert key(identity=cache_identity(r1)) == key(identity=cache_identity(same))
    assert key(identity=cache_identity(r1)) != key(identity=cache_identity(other))


def test_chat_request_of():
    src = [{"role": "user", "content": "x"}]
    req = ChatRequest.of(src, "v1", {"type": "object"}, temperature=0.3, seed=7, max_tokens=10)
    src[0]["content"] = "mutated"
    assert req.messages == ({"role": "user", "content": "x"},)  # copied
    assert req.sampling.temperature == 0.3 and req.sampling.seed == 7 and req.sampling.max_tokens == 10
    assert req.sampling.top_p is None and req.sampling.n == 1
    assert req.prompt_version == "v1" and req.json_schema == {"type": "object"}


def test_chat_result_properties():
    assert ChatResult().text == "" and ChatResult().ok
    r = ChatResult(texts=["a", "b"], error=None)
    assert r.text == "a"
    assert not ChatResult(error="timeout").ok


def test_usage_summary_sums():
    results = [
        ChatResult(texts=["a", "b"], tokens_in=10, tokens_out=20, latency_s=0.5, model_s=0.25, cache_hits=1),
        ChatResult(texts=[], error="boom", latency_s=1.25, model_s=1.0),
        ChatResult(texts=["c"], tokens_in=5, tokens_out=7, latency_s=0.004, cached=True, cache_hits=1),
    ]
    u = usage_summary(results, price_in_per_mtok=2.0, price_out_per_mtok=10.0)
    # samples = 2 + max(0, 1) + 1 = 4; hits = 2; new = 2; tokens 15 / 27
    # cost = (15 * 2 + 27 * 10) / 1e6 = 300 / 1e6 = 0.0003
    assert u == {
        "llm/requests": 3, "llm/samples": 4, "llm/cache_hits": 2, "llm/new_calls": 2, "llm/errors": 1,
        "llm/tokens_in": 15, "llm/tokens_out": 27, "llm/latency_s": 1.75, "llm/model_s": 1.25,
        "llm/est_cost_usd": 0.0003,
    }


def test_usage_summary_empty():
    u = usage_summary([])
    assert u["llm/requests"] == 0 and u["llm/samples"] == 0 and u["llm/est_cost_usd"] == 0


@pytest.mark.parametrize("tin, tout, pin, pout, cost", [(1_000_000, 0, 3.0, 0, 3.0), (0, 500_000, 0, 8.0, 4.0)])
def test_usage_cost(tin, tout, pin, pout, cost):
    u = usage_summary([ChatResult(texts=["x"], tokens_in=tin, tokens_out=tout)], pin, pout)
    assert u["llm/est_cost_usd"] == pytest.approx(cost)


def test_usage_keys_one_scheme_per_role_and_total():
    u = usage_summary([ChatResult(texts=["a"])], role="subject:smollm2")
    assert set(u) == {usage_key(m, "subject:smollm2") for m in (
        "requests", "samples", "cache_hits", "new_calls", "errors", "tokens_in", "tokens_out", "latency_s", "model_s",
        "est_cost_usd")}
    assert usage_key("errors", "subject:smollm2") == "llm/subject:smollm2/errors"
    assert parse_usage_key("llm/subject:org/model/errors") == ("subject:org/model", "errors")
    assert parse_usage_key("llm/errors") == (None, "errors")
    assert parse_usage_key("generator_llm_errors") is None and parse_usage_key("llm/") is None
