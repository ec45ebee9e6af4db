"""`clarify plan`: counts the LLM calls a group would make, sends none, writes nothing of the project."""

import yaml
from typer.testing import CliRunner

from dagster_project.cli import app
from dagster_project.runs.plan import plan_group
from dagster_project.llm.cache import LLMCache


def test_plan_benchmark_group_counts_calls_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    params = {"llm": {"cache_path": ".cache/llm_cache.sqlite",
                      "roles": {"default": {"model": str(tmp_path / "no-such-model.gguf"),
                                            "price_in_per_mtok": 1.0, "price_out_per_mtok": 2.0}}},
              "benchmark": {"n_per_subtype": 2, "subtypes": ["lexical"], "personas": ["precise", "off_focus"]}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    result = CliRunner().invoke(app, ["plan", "benchmark", "--params", "params.yaml"])
    assert result.exit_code == 0, result.output
    summary, ran = plan_group("benchmark", "params.yaml")
    plans = {p.role: p for p in summary}
    assert ran
    # 2 generated queries (placeholders are distinct, so dedup keeps both), each rated and subtype-checked once,
    # then simulated for 2 personas; the model file does not even exist: nothing was loaded or sent
    assert (plans["generator"].requests, plans["judge"].requests, plans["user_simulator"].requests) == (2, 4, 4)
    assert all(p.cached_samples == 0 and p.new_samples == p.samples for p in plans.values())
    assert plans["generator"].max_tokens_out == 2 * 320 and plans["generator"].est_cost_usd > 0
    assert "total: 10 LLM calls to make" in result.output.replace("\n", " ")
    assert not (tmp_path / "assets").exists()
    assert LLMCache(tmp_path / ".cache" / "llm_cache.sqlite").stats()["entries"] == 0


def test_plan_counts_a_repeated_call_once_as_the_real_run_does(tmp_path):
    """A real run caches its first reply, so the same call later is a cache hit; the plan must not count it
    again. Duplicates inside one batch are all sent by a real run, so they all count."""
    from dagster_project.config import LLMConfig
    from dagster_project.llm.chat import ChatRequest
    from dagster_project.llm.client import LLMClient
    from dagster_project.llm.plan import Planner

    planner = Planner()
    client = LLMClient(LLMConfig(cache_path=str(tmp_path / "cache.sqlite")), dry_run=planner)
    ask = ChatRequest.of([{"role": "user", "content": "Which bank?"}], max_tokens=8)
    other = ChatRequest.of([{"role": "user", "content": "Which river?"}], max_tokens=8)
    first = client.chat("judge", [ask, ask])
    again = client.chat("judge", [ask, other])
    [plan] = planner.summary()
    assert (plan.requests, plan.samples, plan.new_samples, plan.cached_samples) == (4, 4, 3, 1)
    assert again[0].texts == first[0].texts  # the reply the real run would read back from its cache
    assert plan.max_tokens_out == 3 * 8
    assert LLMCache(tmp_path / "cache.sqlite").stats()["entries"] == 0  # placeholders are never cached
