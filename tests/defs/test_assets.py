"""Asset logic of the benchmark and evaluation groups with a scripted LLM and a fake embedder."""

import json

import dagster as dg
import duckdb
import numpy as np
import polars as pl
import pytest
from fakes import ScriptedBackend, schema_responder, scripted_llm

from dagster_project.runs.group_runs import materialize_group
from dagster_project.config import Params, parse_params
from dagster_project.definitions import defs
from dagster_project.defs.benchmark import assets as benchmark
from dagster_project.defs.evaluation import assets as evaluation
from dagster_project.defs.quality.checks import build_checks
from dagster_project.lib.io_manager import WarehouseIOManager
from dagster_project.lib.warehouse import read_asset


class OrthogonalEmbedder(dg.ConfigurableResource):
    """Each distinct text gets its own axis, except texts containing 'twin', which share one."""

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), len(texts) + 1), dtype=np.float32)
        for i, t in enumerate(texts):
            out[i, -1 if "twin" in t else i] = 1.0
        return out


def _params(tmp_path, **benchmark_overrides) -> Params:
    data = {
        "llm": {"cache_path": str(tmp_path / "cache.sqlite")},
        "benchmark": {"n_per_subtype": 2, "subtypes": ["lexical", "scope"], **benchmark_overrides},
        "quality": {"max_error_rate": 0.2},
        "evaluation": {"methods": ["base"], "bertscore": False},
    }
    return parse_params(data)


class Runs:
    """The runs of a staged group materialization (partitioned assets run once per partition)."""

    def __init__(self, results):
        self.results = results

    @property
    def success(self) -> bool:
        return bool(self.results) and all(r.success for r in self.results)

    def get_asset_check_evaluations(self):
        return [c for r in self.results for c in r.get_asset_check_evaluations()]


def _run(tmp_path, monkeypatch, responder=schema_responder, fail=None, **overrides):
    monkeypatch.chdir(tmp_path)
    params = _params(tmp_path, **overrides)
    # the evaluation group's partitions (subject x method) come from the params it is built with
    graph = dg.Definitions.merge(dg.Definitions(assets=dg.load_assets_from_modules([benchmark])),
                                 evaluation.build(params))
    keys = {k for a in graph.assets or [] for k in a.keys}
    local = dg.Definitions.merge(graph, dg.Definitions(
        asset_checks=build_checks(keys), executor=dg.in_process_executor, resources={
            "io_manager": WarehouseIOManager(), "params": params,
            "llm": scripted_llm(params, ScriptedBackend(responder, fail)), "embedder": OrthogonalEmbedder()}))
    instance = dg.DagsterInstance.ephemeral()
    results = materialize_group(local, "benchmark", instance)
    if all(r.success for r in results):
        results += materialize_group(local, "evaluation", instance)
    return Runs(results)


def test_definitions_load():
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert {"benchmark/taxonomy", "benchmark/single_turn_queries", "benchmark/persona_dialogues",
            "evaluation/predictions", "evaluation/metric_tables", "evaluation/report"} <= keys
    assert {"benchmark", "evaluation"} <= {graph.get(k).group_name for k in graph.get_all_asset_keys()}
    assert len(build_checks(graph.get_all_asset_keys())) >= 4


def test_whole_graph_with_scripted_llm(tmp_path, monkeypatch):
    result = _run(tmp_path, monkeypatch)
    assert result.success
    checks = result.get_asset_check_evaluations()
    assert checks and all(c.passed for c in checks), [(c.check_name, c.metadata) for c in checks if not c.passed]

    q = pl.read_parquet(tmp_path / "assets/benchmark/single_turn_queries.parquet")
    assert q.height == 4 and q["kept"].all() and (q["status"] == "ok").all()
    assert q["quality"].to_list() == [4, 4, 4, 4]
    d = pl.read_parquet(tmp_path / "assets/benchmark/persona_dialogues.parquet")
    # 4 queries x (2 personas x 2 turns + 4 personas x 3 turns)
    assert d.height == 4 * 16
    p = read_asset(tmp_path / "assets", "evaluation", "predictions")  # all partitions (here: base x smollm2)
    assert (tmp_path / "assets/evaluation/predictions/method=base/subject=smollm2/data.parquet").exists()
    assert p.height == d.height and set(p["status"]) == {"ok"}
    # the scripted subject clarifies on turn 1 and answers later: it misses only turn 2 of 3-turn dialogues
    m = pl.read_parquet(tmp_path / "assets/evaluation/metric_tables.parquet")
    overall = m.filter(pl.col("breakdown") == "overall").row(0, named=True)
    assert overall["n"] == 64
    # the scripted subject asks once, then answers: right on every Precise / Refusal turn and on turn 1, wrong on
    # turns 2 and 3 of the four noisy personas, whose every turn is clarify (paper §4.2)
    # a query's turn 1 is one prompt shared by its six dialogues: weighted once, so per query 1 + 6 + 4 = 11
    # independent turns of which 3 are right (turn 1, Precise / Refusal turn 2) and 8 under-clarified
    assert overall["n_independent"] == pytest.approx(4 * 11)
    assert overall["accuracy"] == pytest.approx(3 / 11)
    assert overall["under_clarification"] == pytest.approx(8 / 11)
    by_turn = {r["turn"]: r["accuracy"] for r in m.filter(pl.col("breakdown") == "by_turn").to_dicts()}
    assert by_turn == {1: 1.0, 2: pytest.approx(8 / 24), 3: 0.0}
    assert (tmp_path / "assets/evaluation/report/report.html").exists()
    with duckdb.connect(str(tmp_path / "assets/warehouse.duckdb"), read_only=True) as con:
        n = con.execute("select count(*) from benchmark.persona_dialogues").fetchone()[0]
    assert n == 64


def test_dedup_keeps_best_and_records_the_rest(tmp_path, monkeypatch):
    """Lexical and scope queries are near-duplicates; the judge rates scope higher, so scope is kept."""

    def responder(job, idx):
        text = schema_responder(job, idx)
        props = (job.json_schema or {}).get("properties", {})
        prompt = job.messages[-1]["content"]
        if "query" in props and ("lexical" in prompt or "scope" in prompt):
            reply = json.loads(text)
            reply["query"] = "a twin request?" if "lexical" in prompt else "twin request, please"
            return json.dumps(reply)
        if "score" in props:
            return json.dumps({"score": 5 if "Ambiguity type: Scope" in prompt else 2, "reason": "r"})
        return text

    result = _run(tmp_path, monkeypatch, responder, n_per_subtype=1, subtypes=["lexical", "scope", "value"])
    assert result.success
    q = pl.read_parquet(tmp_path / "assets/benchmark/single_turn_queries.parquet").sort("query_id")
    rows = {r["query_id"]: r for r in q.to_dicts()}
    assert rows["scope-000"]["kept"] and rows["value-000"]["kept"]
    lex = rows["lexical-000"]
    assert not lex["kept"] and lex["duplicate_of"] == "scope-000" and lex["dedup_reason"] == "semantic"
    # only kept and valid queries become dialogues: value-000 (judge rating 2) falls under validation.min_quality
    v = pl.read_parquet(tmp_path / "assets/benchmark/validated_queries.parquet").sort("query_id")
    assert v["removed_by"].to_list() == [None, None, "low_rating"] and v["valid"].to_list() == [False, True, False]
    d = pl.read_parquet(tmp_path / "assets/benchmark/persona_dialogues.parquet")
    assert set(d["query_id"]) == {"scope-000"}


def test_failures_become_rows_not_crashes(tmp_path, monkeypatch):
    """Broken JSON and LLM errors are rows with a status; downstream turns of a failed dialogue are kept."""

    def responder(job, idx):
        if "reply_1" in (job.json_schema or {}).get("properties", {}):
            return "{not json"
        return schema_responder(job, idx)

    def fail(job):
        return "RuntimeError: boom" if "refusal" in json.dumps(job.messages).lower() else None

    result = _run(tmp_path, monkeypatch, responder, fail)
    d = pl.read_parquet(tmp_path / "assets/benchmark/persona_dialogues.parquet")
    assert d.height == 64  # nothing dropped
    later = d.filter(pl.col("turn") > 1)
    by_persona = dict(later.group_by("persona").agg(pl.col("status").unique().sort()).iter_rows())
    assert by_persona["precise"] == ["ok"]
    assert by_persona["refusal"] == ["llm_error"]
    assert by_persona["off_focus"] == ["parse_error"]
    assert (d.filter(pl.col("turn") == 1)["status"] == "ok").all()
    p = read_asset(tmp_path / "assets", "evaluation", "predictions")
    assert p.height == 64
    assert p.filter(pl.col("status") == "input_error").height == later.filter(pl.col("status") != "ok").height
    # 4 refusal simulations failed: llm_error rows are 4/64 of dialogue turns, within max_error_rate 0.2
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks["gx_persona_dialogues"] is True


def test_backend_exception_fails_rows_not_the_run(tmp_path, monkeypatch):
    """A backend that raises (instead of returning errors) still yields llm_error rows."""

    def responder(job, idx):
        if "score" in (job.json_schema or {}).get("properties", {}):
            raise ConnectionError("judge endpoint down")
        return schema_responder(job, idx)

    result = _run(tmp_path, monkeypatch, responder)
    q = pl.read_parquet(tmp_path / "assets/benchmark/single_turn_queries.parquet")
    assert q["quality"].is_null().all()
    assert set(q["quality_status"]) == {"llm_error"}
    # the rows are written; the asset's check then fails on the judge role's error budget (every request failed)
    [check] = [c for c in result.get_asset_check_evaluations() if c.check_name == "gx_single_turn_queries"]
    over = check.metadata["results"].value["error budget per role"]["over_budget"]
    assert not check.passed and over["judge"]["rate"] == 1.0
