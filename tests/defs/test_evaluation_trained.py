"""Trained subjects in the evaluation group: the training -> predictions lineage edge, evaluation.subject_methods
(only planned subject x method partitions run), and a clear failure when the trained model is not built."""

import json

import dagster as dg
import polars as pl
import pytest
import yaml
from fakes import ScriptedBackend

from dagster_project.cli import _default_partitions, materialize_group
from dagster_project.config import ParamsError, load_params, parse_params
from dagster_project.defs.evaluation import assets as evaluation
from dagster_project.defs.evaluation.assets import planned_partitions, training_deps
from dagster_project.lib.warehouse import read_asset
from defs.test_evaluation import SCRIPTED, _defs, eval_responder

TRAINED = {"backend": "transformers", "model": "training/clarilm_sft"}


def _params(tmp_path, **evaluation) -> str:
    data = {"llm": {"cache_path": str(tmp_path / "cache.sqlite"),
                    "subjects": {"smollm2": {"backend": "llamacpp"}, "sft": TRAINED}},
            "benchmark": {"n_per_subtype": 1, "subtypes": ["lexical"]},
            "evaluation": {"methods": ["base", "cot"], "bertscore": False, "judge_per_subtype": 0,
                           "subject_methods": {"sft": ["base"]}, **evaluation}}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_lineage_edge_from_the_training_asset(tmp_path):
    SCRIPTED["backend"] = ScriptedBackend(eval_responder)
    params = load_params(_params(tmp_path))
    assert training_deps(params) == [dg.AssetKey(["training", "clarilm_sft"])]
    graph = _defs(_params(tmp_path)).resolve_asset_graph()
    parents = graph.get(dg.AssetKey(["evaluation", "predictions"])).parent_keys
    assert dg.AssetKey(["training", "clarilm_sft"]) in parents


def test_subject_methods_plan_only_their_partitions(tmp_path):
    params = load_params(_params(tmp_path))
    assert sorted(planned_partitions(params)) == ["base|sft", "base|smollm2", "cot|smollm2"]
    assert sorted(_default_partitions("evaluation", _params(tmp_path))) == sorted(planned_partitions(params))
    assert params.evaluation.methods_for("smollm2") == ["base", "cot"]
    with pytest.raises(ParamsError, match="evaluation.subject_methods: unknown subject"):
        parse_params({"evaluation": {"subject_methods": {"nobody": ["base"]}}})
    with pytest.raises(ParamsError, match="subject_methods.smollm2"):
        parse_params({"evaluation": {"methods": ["base"], "subject_methods": {"smollm2": ["cot"]}}})
    with pytest.raises(ParamsError, match="needs backend 'transformers'"):
        parse_params({"llm": {"subjects": {"x": {"backend": "llamacpp", "model": "training/x"}}}})


def test_missing_model_gives_input_error_rows_then_the_built_one_runs_and_unplanned_partitions_are_empty(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    SCRIPTED["backend"] = ScriptedBackend(eval_responder)
    defs = _defs(_params(tmp_path))
    instance = dg.DagsterInstance.ephemeral()
    assert all(r.success for r in materialize_group(defs, "benchmark", instance))
    # an unbuilt model (never trained, or training kept no row) does not stop the stage: every turn is a row that
    # says why, and no LLM call is made for it
    assert all(r.success for r in materialize_group(defs, "evaluation", instance, ["base|sft"]))
    lost = read_asset(tmp_path / "assets", "evaluation", "predictions")
    assert lost.height > 0 and set(lost["status"]) == {"input_error"} and set(lost["llm_calls"]) == {0}
    msg = lost["error"][0]
    assert "llm.subjects.sft.model" in msg and "clarify materialize training" in msg
    folder = tmp_path / "assets" / "training" / "clarilm_sft"
    (folder / "adapter").mkdir(parents=True)  # the scripted backend loads nothing: the contract's files suffice
    (folder / "adapter" / "adapter_config.json").write_text("{}")
    (folder / "training.json").write_text(json.dumps({"base_model": "smollm2-135m-instruct"}))
    results = materialize_group(defs, "evaluation", instance, ["base|sft", "cot|sft"])
    assert all(r.success for r in results)
    p = read_asset(tmp_path / "assets", "evaluation", "predictions")
    assert set(p["subject"]) == {"sft"} and set(p["method"]) == {"base"} and p.height > 0
    skipped = pl.read_parquet(tmp_path / "assets/evaluation/predictions/method=cot/subject=sft/data.parquet")
    assert skipped.height == 0


def test_clarilm_held_out_split_is_a_dataset_and_training_overlap_is_counted(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    SCRIPTED["backend"] = ScriptedBackend(eval_responder)
    msgs = pl.List(pl.Struct({"role": pl.Utf8, "content": pl.Utf8}))
    (tmp_path / "assets" / "annotations").mkdir(parents=True)
    pl.DataFrame({"question_id": ["q1", "q2", "q3"], "question": ["Book a flight", "What is 2+2?", "Plan it"],
                  "question_source": ["QL"] * 3, "split": ["test"] * 3, "reference_action": ["clarify", "answer", None],
                  "reference_question": ["Where to?", None, None], "reference_answer": [None, "4", None],
                  "status": ["ok", "ok", "llm_error"]}).write_parquet(tmp_path / "assets/annotations/held_out_set.parquet")
    pl.DataFrame({"messages": [[{"role": "user", "content": "book a FLIGHT!"}, {"role": "assistant", "content": "ok"}]]},
                 schema={"messages": msgs}).write_parquet(tmp_path / "assets/annotations/sft_dataset.parquet")
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({
        "llm": {"cache_path": str(tmp_path / "cache.sqlite")},
        "benchmark": {"n_per_subtype": 1, "subtypes": ["lexical"]},
        "evaluation": {"methods": ["base"], "datasets": ["clarilm_test"], "bertscore": False,
                       "judge_per_subtype": 0}}))
    base = _defs(str(path))  # the group's assets; its checks come from build() as in definitions.py
    defs = dg.Definitions.merge(base, dg.Definitions(asset_checks=evaluation.build(load_params(str(path))).asset_checks))
    instance = dg.DagsterInstance.ephemeral()
    results = materialize_group(defs, "benchmark", instance) + materialize_group(defs, "evaluation", instance)
    assert all(r.success for r in results)
    ext = pl.read_parquet(tmp_path / "assets/evaluation/external_dialogues.parquet")
    assert ext.select("dataset", "dialogue_id", "reference_action", "status").rows() == [
        ("clarilm_test", "q1", "clarify", "ok"), ("clarilm_test", "q2", "answer", "ok"),
        ("clarilm_test", "q3", None, "no_reference")]
    p = read_asset(tmp_path / "assets", "evaluation", "predictions")
    assert p.height == 3 and set(p["dataset"]) == {"clarilm_test"}
    check = next(c for r in results for c in r.get_asset_check_evaluations() if c.check_name == "held_out_disjoint")
    assert not check.passed  # "Book a flight" is in the SFT export: the check says so
    assert check.metadata["overlap_annotations.sft_dataset"].value == 1
