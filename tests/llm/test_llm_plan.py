"""clarify plan's planning client (llm/plan.py) and the openai backend's Retry-After parsing."""

import json
import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import jsonschema
import pytest

from dagster_project.config import parse_params
from dagster_project.llm.backends.openai import retry_after_s
from dagster_project.llm.chat import ChatRequest, sample_cache_key
from dagster_project.llm.client import LLMClient
from dagster_project.llm.identity import cache_identity
from dagster_project.llm.plan import Planner, placeholder

SCORE_SCHEMA = {"type": "object", "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 5}},
                "required": ["score"]}


@pytest.mark.parametrize("schema", [{"type": "object", "properties": {"a": {"type": ["string", "null"],
                                                                            "minLength": 90, "maxLength": 95}}},
                                    {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1,
                                                                            "maximum": 5}, "k": {"enum": ["x", "y"]}},
                                     "required": ["n", "k"]}])
def test_placeholder_satisfies_schemas(schema):
    """Project schemas: tests/llm/test_project_tasks.py (every LLMTask)."""
    for seed in range(5):
        jsonschema.validate(placeholder(schema, random.Random(seed)), schema)


def test_placeholders_differ_between_requests():
    texts = {placeholder({"type": "string", "maxLength": 80}, random.Random(k)) for k in ("a", "b", "c")}
    assert len(texts) == 3


def _params(tmp_path, price_in=0.0, price_out=0.0):
    return parse_params({"llm": {"cache_path": str(tmp_path / "c.sqlite"), "roles": {
        "default": {"model": "nowhere.gguf"},
        "judge": {"backend": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1",
                  "price_in_per_mtok": price_in, "price_out_per_mtok": price_out}}}}).llm


def test_planning_client_counts_cached_and_new_calls_without_a_backend(tmp_path):
    cfg = _params(tmp_path, price_in=2.0, price_out=8.0)
    reqs = [ChatRequest.of([{"role": "user", "content": "x" * 400}], "p@1", SCORE_SCHEMA, max_tokens=50, n=2),
            ChatRequest.of([{"role": "user", "content": "y" * 40}], "p@1", max_tokens=10)]
    # one sample is already in the cache: it is free in the plan
    real = LLMClient(cfg, backends={"openai": lambda c: (_ for _ in ()).throw(AssertionError("no backend"))})
    key = sample_cache_key(cache_identity(cfg.role("judge")), reqs[1], real.resolve(cfg.role("judge"), reqs[1]), 0)
    real.cache.put_many([(key, "m", "cached reply", 12, 3)])

    planner = Planner()
    out = LLMClient(cfg, dry_run=planner).chat("judge", reqs, tag="benchmark/x")
    assert json.loads(out[0].texts[0])["score"] == 5  # the highest rating: downstream filters keep the row
    jsonschema.validate(json.loads(out[0].texts[1]), SCORE_SCHEMA)
    assert out[1].text == "cached reply" and out[1].cached
    [p] = planner.summary()
    assert p.assets == {"benchmark/x"}
    assert (p.role, p.backend, p.requests, p.samples, p.cached_samples, p.new_samples) == ("judge", "openai", 2, 3, 1, 2)
    assert p.est_tokens_in == 2 * (400 // 4 + 4)
    assert p.max_tokens_out == 2 * 50
    assert p.est_cost_usd == pytest.approx((208 * 2.0 + 100 * 8.0) / 1e6)
    # nothing the plan made up was cached, and no usage was recorded
    assert real.cache.stats()["entries"] == 1
    assert real.cache.usage_by_role() == []


def test_llm_client_records_usage_per_role(tmp_path):
    from fakes import ScriptedBackend

    cfg = _params(tmp_path)
    client = LLMClient(cfg, backends={"llamacpp": lambda c: ScriptedBackend(lambda job, i: f"r{i}")})
    reqs = [ChatRequest.of([{"role": "user", "content": f"q{i}"}], n=2) for i in range(3)]
    client.chat("generator", reqs)
    client.chat("generator", reqs)  # all cached
    [u] = client.cache.usage_by_role()
    assert (u["role"], u["chat_calls"], u["requests"], u["samples"], u["cache_hits"], u["errors"]) == \
        ("generator", 2, 6, 12, 6, 0)
    assert (u["new_tokens_in"], u["new_tokens_out"]) == (60, 30)  # ScriptedBackend: 10 in / 5 out per sample


class _Resp:
    def __init__(self, value):
        self.headers = {"retry-after": value} if value is not None else {}


class _Err(Exception):
    def __init__(self, value):
        super().__init__("x")
        self.response = _Resp(value)


def test_retry_after_seconds_and_http_date():
    assert retry_after_s(_Err("3")) == 3.0
    assert retry_after_s(_Err("1000")) == 60.0  # capped
    assert retry_after_s(_Err(None)) == 0.0 and retry_after_s(ValueError("no response")) == 0.0
    assert retry_after_s(_Err("soon")) == 0.0
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25 <= retry_after_s(_Err(when)) <= 31
