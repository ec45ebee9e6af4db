"""headlines/double_turn_table1 + double_turn_comparisons: trained double_turn models (scripted) and the base through
the double_turn group's own evaluation; DPO on double-turn labels clarifies where it should, DPO on single-turn
labels and the base presuppose one reading; every number follows from the scripted world of test_double_turn."""

import json

import dagster as dg
import polars as pl
import pytest
import yaml
from defs.test_double_turn import Q1, _write_inputs, world
from fakes import ScriptedBackend

from dagster_project.config import load_params
from dagster_project.core.training.template import double_turn_template
from dagster_project.defs.double_turn import assets as double_turn
from dagster_project.defs.headlines import assets as headlines
from dagster_project.defs.headlines.group import GROUP
from dagster_project.defs.quality.checks import load_suites, validate_frame
from dagster_project.lib.catalog import describe
from dagster_project.lib.resources import LLMResource
from dagster_project.lib.io_manager import WarehouseIOManager
from dagster_project.training.model_folder import RESULT_SCHEMA


def presupposes(job, idx):
    """Clarify-or-Direct that never asks: answers the 1997 reading of the ambiguous question."""
    content = job.messages[-1]["content"]
    if "If the question is clear" in content and Q1 in content:
        return "James Cameron"
    return world(job, idx)


def test_table1_with_trained_models_and_the_published_gain(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write_inputs(tmp_path)
    base = tmp_path / "base_hf"
    base.mkdir()
    (base / "config.json").write_text("{}")
    training = tmp_path / "assets" / "training"
    for name in ("double_turn_dpo", "single_turn_dpo"):
        (training / name / "adapter").mkdir(parents=True)
        (training / name / "adapter" / "adapter_config.json").write_text("{}")
        template = double_turn_template("free_text").record()
        (training / name / "training.json").write_text(json.dumps({"base_model": str(base), "template": template}))
        pl.DataFrame([{"model": name, "status": "trained"}], schema=RESULT_SCHEMA).write_parquet(
            training / f"{name}.parquet")
    data = {
        "llm": {"cache_path": str(tmp_path / "cache.sqlite"),
                "subjects": {"smollm2": {"backend": "llamacpp"},
                             "base": {"backend": "transformers", "model": str(base)},
                             "dt": {"backend": "transformers", "model": "training/double_turn_dpo"}}},
        "evaluation": {"trained_baseline": "base", "trained_pairs": []},
        "training": {"models": ["double_turn_dpo", "single_turn_dpo"]},
        "double_turn": {"inputs": [{"path": "ambig.json", "format": "ambigqa", "split": "train"},
                                   {"path": "ambig_eval.json", "format": "ambigqa", "split": "eval"},
                                   {"path": "nq_eval.jsonl", "format": "nq_open", "split": "eval"}],
                        "max_queries": None, "n_direct_samples": 3, "random_repeats": 20, "bootstrap_samples": 200,
                        "subjects": ["smollm2"]}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(data))
    params = load_params(tmp_path / "params.yaml")
    sent: dict[str, ScriptedBackend] = {}

    def backend(cfg):
        return sent.setdefault(cfg.model, ScriptedBackend(world if cfg.model.endswith("double_turn_dpo")
                                                          or cfg.backend == "llamacpp" else presupposes))

    llm = LLMResource(params.llm, backends={"llamacpp": backend, "transformers": backend})
    assets = [*dg.load_assets_from_modules([double_turn]), *headlines.build(params).assets]
    keys = [["double_turn", "qa_sets"], ["double_turn", "qa_sets_rejected"],
            *[["headlines", n] for n in ("double_turn_trained_interactions", "double_turn_table1",
                                         "double_turn_comparisons")]]
    result = dg.materialize(assets, selection=[dg.AssetKey(k) for k in keys],
                            resources={"io_manager": WarehouseIOManager(), "params": params, "llm": llm})
    assert result.success
    t1 = pl.read_parquet(tmp_path / "assets/headlines/double_turn_table1.parquet")
    cod = {r["model"]: r for r in t1.filter(pl.col("system") == "clarify_or_direct").iter_rows(named=True)}
    assert set(cod) == {"Base", "DPO (double-turn labels)", "DPO (single-turn labels)"}
    assert cod["DPO (double-turn labels)"]["f1_total"] == 1.0 and cod["DPO (double-turn labels)"]["da_accuracy"] == 1.0
    assert cod["DPO (single-turn labels)"]["f1_total"] == pytest.approx(8 / 9)  # e1: one of two readings
    assert cod["DPO (single-turn labels)"]["da_accuracy"] == pytest.approx(2 / 3)
    assert cod["DPO (double-turn labels)"]["subject"] == "dt"  # its llm.subjects entry; the other has none
    assert cod["DPO (single-turn labels)"]["subject"] == "single_turn_dpo"
    assert set(t1["status"]) == {"ok"} and (t1["n_queries"] == 3).all() and (t1["n_excluded"] == 0).all()
    comp = pl.read_parquet(tmp_path / "assets/headlines/double_turn_comparisons.parquet")
    head = {r["metric"]: r for r in comp.filter((pl.col("subject") == "dt") & (pl.col("reference") == "single_turn_dpo"))
            .iter_rows(named=True)}
    assert head["f1_total"]["our_gain_points"] == pytest.approx(100 / 9)
    assert head["f1_total"]["published_gain_points"] == 5.0 and head["da_accuracy"]["published_gain_points"] == 3.0
    assert head["da_accuracy"]["diff"] == pytest.approx(1 / 3) and head["f1_total"]["n_paired"] == 3
    assert head["f1_total"]["verdict"].startswith("not significant: too few queries (n=3")
    assert "abstract" in head["f1_total"]["published_source"]
    vs_base = comp.filter(pl.col("reference") == "base")
    assert set(vs_base["subject"]) == {"dt", "single_turn_dpo"} and vs_base["published_gain_points"].is_null().all()
    for name in ("double_turn_trained_interactions", "double_turn_table1", "double_turn_comparisons"):
        cols = pl.read_parquet_schema(tmp_path / f"assets/headlines/{name}.parquet")
        assert not [c for c in cols if not describe(f"headlines/{name}", c)], name
    suites = [s for s in load_suites() if s.group == "headlines" and s.asset.startswith("double_turn")]
    assert len(suites) == 2
    for suite in suites:  # the GX suites of the stored tables
        ok, results = validate_frame(pl.read_parquet(tmp_path / f"assets/headlines/{suite.asset}.parquet"), suite, params)
        assert ok, (suite.asset, results)
    # the registry entry: the report index's headline table and `clarify metrics`' numbers
    captions = dict(GROUP.headlines(tmp_path / "assets"))
    table1 = captions["double-turn Table 1 with the trained models (double_turn_table1)"]
    assert table1 is not None and {"model", "system", "f1_total", "da_accuracy"} <= set(table1.columns)
    numbers = GROUP.metrics[1](tmp_path / "assets")
    assert numbers["double_turn"]["dt"]["clarify_or_direct"]["f1_total"] == 1.0 and "intents" not in numbers


def test_no_trained_model_served_runs_nothing_and_every_row_says_why(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write_inputs(tmp_path)
    training = tmp_path / "assets" / "training"
    training.mkdir(parents=True)
    for name in ("double_turn_sft", "double_turn_dpo"):
        pl.DataFrame([{"model": name, "status": "skipped_no_data", "reason": "no rows"}], schema=RESULT_SCHEMA
                     ).write_parquet(training / f"{name}.parquet")
    data = {"llm": {"cache_path": str(tmp_path / "cache.sqlite"),
                    "subjects": {"smollm2": {"backend": "llamacpp"}, "base": {"backend": "transformers",
                                                                            "model": str(tmp_path)}}},
            "evaluation": {"trained_baseline": "base", "trained_pairs": []},
            "training": {"models": ["double_turn_sft", "double_turn_dpo"]},
            "double_turn": {"inputs": [{"path": "ambig.json", "format": "ambigqa", "split": "train"},
                                       {"path": "ambig_eval.json", "format": "ambigqa", "split": "eval"}],
                            "max_queries": None}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(data))
    params = load_params(tmp_path / "params.yaml")
    backend = ScriptedBackend(world)
    llm = LLMResource(params.llm, backends={"llamacpp": lambda cfg: backend, "transformers": lambda cfg: backend})
    assets = [*dg.load_assets_from_modules([double_turn]), *headlines.build(params).assets]
    keys = [["double_turn", "qa_sets"], ["double_turn", "qa_sets_rejected"],
            *[["headlines", n] for n in ("double_turn_trained_interactions", "double_turn_table1",
                                         "double_turn_comparisons")]]
    result = dg.materialize(assets, selection=[dg.AssetKey(k) for k in keys],
                            resources={"io_manager": WarehouseIOManager(), "params": params, "llm": llm})
    assert result.success and not backend.jobs  # no model was asked anything
    t1 = pl.read_parquet(tmp_path / "assets/headlines/double_turn_table1.parquet")
    assert t1.select("model", "status").rows() == [("Base", "not_served"), ("SFT", "not_served"),
                                                   ("DPO (double-turn labels)", "not_served")]
    assert t1["reason"].str.contains("no rows|no trained model").all()
    assert pl.read_parquet(tmp_path / "assets/headlines/double_turn_comparisons.parquet").is_empty()
