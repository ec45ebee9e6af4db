"""Trained subjects in the evaluation group: the training -> predictions lineage edge, evaluation.subject_methods
(only planned subject x method partitions run), and a clear failure when the trained model is not built."""

import json
import logging

import dagster as dg
import polars as pl
import pytest
import yaml
import numpy as np
from fakes import ScriptedBackend, scripted_llm

from dagster_project.cli import _default_partitions
from dagster_project.runs.group_runs import materialize_group
from dagster_project.config import ParamsError, load_params, parse_params
from dagster_project.defs.evaluation import assets as evaluation
from dagster_project.defs.evaluation.assets import planned_partitions, training_deps
from dagster_project.core.clarifymt.external import held_out_turns
from dagster_project.core.double_turn.exports import turn2_prompt
from dagster_project.core.training.template import clarilm_template
from dagster_project.core.training.overlap import normalize_query
from dagster_project.defs.benchmark import assets as benchmark
from dagster_project.defs.quality.checks import build_checks
from dagster_project.lib.io_manager import WarehouseIOManager
from dagster_project.lib.warehouse import read_asset
from dagster_project.training.exports import trained_on
from defs.test_evaluation import SCRIPTED, _defs, eval_responder

TRAINED = {"backend": "transformers", "model": "training/clarilm_sft"}


class WordsEmbedder(dg.ConfigurableResource):
    """Bag of words hashed into 64 dimensions, unit length: the same words, the same vector, whatever the batch."""

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), 64), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in normalize_query(t).split():
                out[i, sum(map(ord, w)) % 64] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


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
    with pytest.raises(ParamsError, match="needs backend 'llamacpp' / 'transformers' / 'vllm', got 'openai'"):
        parse_params({"llm": {"subjects": {"x": {"backend": "openai", "model": "training/x",
                                                 "base_url": "http://127.0.0.1:1/v1"}}}})


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
    # a folder trained before templates were recorded is refused, naming its training.json and the field
    assert all(r.success for r in materialize_group(defs, "evaluation", instance, ["base|sft"]))
    old = read_asset(tmp_path / "assets", "evaluation", "predictions")
    assert set(old["status"]) == {"input_error"} and "has no `template` field" in old["error"][0]
    assert "assets/training/clarilm_sft/training.json" in old["error"][0]
    (folder / "training.json").write_text(json.dumps({"base_model": "smollm2-135m-instruct",
                                                      "template": clarilm_template("Decide.").record()}))
    results = materialize_group(defs, "evaluation", instance, ["base|sft", "cot|sft"])
    assert all(r.success for r in results)
    p = read_asset(tmp_path / "assets", "evaluation", "predictions")
    assert set(p["subject"]) == {"sft"} and set(p["method"]) == {"base"} and p.height > 0
    assert set(p["prompt_version"]) == {clarilm_template("Decide.").version}  # asked in its training template
    skipped = pl.read_parquet(tmp_path / "assets/evaluation/predictions/method=cot/subject=sft/data.parquet")
    assert skipped.height == 0


def _warnings(instance, results) -> list[str]:
    return [e.user_message for r in results for e in instance.all_logs(r.run_id)
            if e.level == logging.WARNING and "not materialized" in e.user_message]


def test_the_tables_read_the_planned_partitions_and_warn_only_of_a_missing_one(tmp_path, monkeypatch):
    """cot|sft is in the partition grid but not planned (evaluation.subject_methods): the downstream assets map to
    the planned keys only, so a built group logs no gap; a planned key whose file is gone is still warned about."""
    monkeypatch.chdir(tmp_path)
    SCRIPTED["backend"] = ScriptedBackend(eval_responder)
    defs = _defs(_params(tmp_path))
    planned = sorted(planned_partitions(load_params(_params(tmp_path))))
    for name in ("judge_scores", "pairwise_judgements", "metric_tables", "method_comparison", "trained_comparison",
                 "report"):
        mapping = defs.resolve_assets_def(dg.AssetKey(["evaluation", name])).get_partition_mapping(
            dg.AssetKey(["evaluation", "predictions"]))
        assert sorted(mapping.partition_keys) == planned, name
    instance = dg.DagsterInstance.ephemeral()
    assert all(r.success for r in materialize_group(defs, "benchmark", instance))
    results = materialize_group(defs, "evaluation", instance, _default_partitions("evaluation", _params(tmp_path)))
    assert all(r.success for r in results) and not _warnings(instance, results)  # as `clarify materialize` runs it
    assert not (tmp_path / "assets/evaluation/predictions/method=cot/subject=sft").exists()
    (tmp_path / "assets/evaluation/predictions/method=cot/subject=smollm2/data.parquet").unlink()
    job = defs.resolve_implicit_global_asset_job_def()
    again = job.execute_in_process(instance=instance, asset_selection=[dg.AssetKey(["evaluation", "metric_tables"])])
    assert again.success
    assert _warnings(instance, [again]) == ["evaluation/predictions: 1 of 3 partitions not materialized, skipped: "
                                            "['cot|smollm2']"]


def test_clarilm_held_out_split_is_a_dataset_and_a_planted_overlap_blocks(tmp_path, monkeypatch):
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
        "llm": {"cache_path": str(tmp_path / "cache.sqlite"),
                "subjects": {"smollm2": {"backend": "llamacpp"}, "sft": TRAINED,
                             "dt": {"backend": "transformers", "model": "training/double_turn_dpo"}}},
        "benchmark": {"n_per_subtype": 1, "subtypes": ["lexical"]},
        "evaluation": {"methods": ["base"], "datasets": ["clarilm_test"], "bertscore": False,
                       "judge_per_subtype": 0}}))
    params = load_params(str(path))  # the group's assets and checks as in definitions.py, a real-shaped embedder
    # dt's model folder is built (its training.json), but not the export it was trained on: a failure
    mkdirs(tmp_path / "assets/training/double_turn_dpo/training.json").write_text(json.dumps({"name": "double_turn_dpo"}))
    assets = [*dg.load_assets_from_modules([benchmark]), *evaluation.build(params).assets]
    defs = dg.Definitions(
        assets=assets, asset_checks=[*build_checks({k for a in assets for k in a.keys}),
                                     *evaluation.build(params).asset_checks],
        executor=dg.in_process_executor, resources={"io_manager": WarehouseIOManager(), "params": params,
                                                    "llm": scripted_llm(params, SCRIPTED["backend"]),
                                                    "embedder": WordsEmbedder()})
    instance = dg.DagsterInstance.ephemeral()
    results = materialize_group(defs, "benchmark", instance) + materialize_group(defs, "evaluation", instance)
    ext = pl.read_parquet(tmp_path / "assets/evaluation/external_dialogues.parquet")
    assert ext.select("dataset", "dialogue_id", "reference_action", "status").rows() == [
        ("clarilm_test", "q1", "clarify", "ok"), ("clarilm_test", "q2", "answer", "ok"),
        ("clarilm_test", "q3", None, "no_reference")]
    p = read_asset(tmp_path / "assets", "evaluation", "predictions")
    assert p.height == 9 and set(p["dataset"]) == {"clarilm_test"}
    check = next(c for r in results for c in r.get_asset_check_evaluations() if c.check_name == "held_out_disjoint")
    assert not check.passed  # "Book a flight" is in the SFT export sft was trained on: the pair is named
    assert check.metadata["overlap_annotations.sft_dataset"].value == 1 and check.metadata["exact_pairs"].value == 1
    assert "Book a flight" in check.metadata["pairs"].value and "book a FLIGHT!" in check.metadata["pairs"].value
    missing = check.metadata["missing_exports"].value  # dt's export was never built: nothing could be checked
    assert any("training/double_turn_dpo_exports:dpo_dataset" in x for x in missing)
    assert all("(trained on by dt)" in x and "does not exist" in x for x in missing)
    assert check.blocking and not (tmp_path / "assets/evaluation/report").exists()  # blocked: no report


def _held_out(questions):
    held = pl.DataFrame({"question_id": [f"q{i}" for i in range(len(questions))], "question": questions,
                         "question_source": ["QL"] * len(questions), "split": ["test"] * len(questions),
                         "reference_action": ["clarify"] * len(questions),
                         "reference_question": ["Which one?"] * len(questions), "status": ["ok"] * len(questions)})
    return held_out_turns(held, "clarilm_test")


def mkdirs(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def test_held_out_disjoint_passes_only_without_overlap_and_reads_jsonl_exports(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    params = parse_params({"llm": {"subjects": {"dt": {"backend": "transformers", "model": "training/double_turn_dpo"},
                                                "st": {"backend": "transformers", "model": "training/single_turn_dpo"}}},
                           "evaluation": {"methods": ["base"], "datasets": ["clarilm_test"]}})
    exported = tmp_path / "assets/training/exports/double_turn/dpo_dataset.jsonl"
    exported.parent.mkdir(parents=True)
    prompt = turn2_prompt("clarify_or_direct", "Who won the world cup?", params.double_turn.subject_output)
    exported.write_text(json.dumps({"prompt": prompt, "chosen": [{"role": "assistant", "content": "a"}],
                                    "rejected": [{"role": "assistant", "content": "b"}]}) + "\n")
    listed = trained_on("double_turn_dpo") + trained_on("single_turn_dpo")  # every export the two models read
    tables: dict[str, list[str]] = {}
    for ref in sorted(set(listed)):  # per exports table, the names it lists
        table, name = ref.split(":")
        tables.setdefault(table, []).append(name)
    for table, names in tables.items():  # dpo_dataset written, the others listed, empty, not written
        written = [n == "dpo_dataset" for n in names]
        pl.DataFrame({"export": names, "path": [str(exported) if w else None for w in written],
                      "rows": [int(w) for w in written], "written": written,
                      "reason": [None if w else "empty: no kept rows" for w in written]}
                     ).write_parquet(mkdirs(tmp_path / f"assets/{table}.parquet"))
    for name in ("double_turn_dpo", "single_turn_dpo"):  # both models built
        mkdirs(tmp_path / f"assets/training/{name}/training.json").write_text(json.dumps({"name": name}))
    embed = WordsEmbedder().encode
    clean = evaluation.held_out_disjoint(params, embed, external_dialogues=_held_out(["Plan my trip"]))
    assert clean.passed and clean.metadata["exports_checked"].value == len(set(listed))
    # the question inside the export's rendered prompt is found (the template is unwrapped), case and "?" aside
    leak = evaluation.held_out_disjoint(params, embed, external_dialogues=_held_out(["who won the world cup"]))
    assert not leak.passed and leak.metadata["exact_pairs"].value == 1


def test_held_out_disjoint_skips_a_trained_subject_that_was_never_built(tmp_path, monkeypatch):
    """A missing export of a subject whose training folder has no training.json (`make loop` builds clarilm_sft only)
    is no failure: nothing was trained on it; the metadata names it under not_built."""
    monkeypatch.chdir(tmp_path)
    params = parse_params({"llm": {"subjects": {"dt": {"backend": "transformers", "model": "training/double_turn_dpo"}}},
                           "evaluation": {"methods": ["base"], "datasets": ["clarilm_test"]}})
    result = evaluation.held_out_disjoint(params, WordsEmbedder().encode, external_dialogues=_held_out(["Plan it"]))
    assert result.passed and result.metadata["exports_checked"].value == 0
    assert all("(for dt: not built)" in x for x in result.metadata["not_built"].value)
    assert "missing_exports" not in result.metadata


def test_an_unfair_reference_fails_the_comparison_naming_both(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    params = parse_params({"llm": {"subjects": {"smollm2": {"backend": "llamacpp"}, "sft": TRAINED}},
                           "evaluation": {"methods": ["base"], "trained_baseline": "smollm2"}})
    context = dg.build_asset_context(resources={"params": params})
    with pytest.raises(dg.Failure, match="unfair comparison 'sft' vs reference 'smollm2': it is served by llamacpp"):
        evaluation.trained_comparison(context, params, predictions=pl.DataFrame(), judge_scores=pl.DataFrame())


def test_trained_subjects_and_their_references_are_evaluated_on_trained_datasets_only():
    from dagster_project.defs.evaluation.assets import subject_datasets

    data = {"llm": {"subjects": {"smollm2": {"backend": "llamacpp"}, "base_hf": {"backend": "transformers"},
                                 "other": {"backend": "transformers"}, "sft": TRAINED}},
            "evaluation": {"datasets": ["clarifymt", "clariq"], "trained_baseline": "base_hf",
                           "external": {"clariq": {"format": "clariq", "path": "data/external/clariq_sample.tsv"}}}}
    everywhere = parse_params(data)
    assert {s: subject_datasets(everywhere, s) for s in everywhere.llm.subjects} == dict.fromkeys(
        ["smollm2", "base_hf", "other", "sft"], ["clarifymt", "clariq"])
    data["evaluation"]["trained_datasets"] = ["clariq"]
    one = parse_params(data)
    assert {s: subject_datasets(one, s) for s in one.llm.subjects} == {
        "smollm2": ["clarifymt", "clariq"], "other": ["clarifymt", "clariq"], "base_hf": ["clariq"], "sft": ["clariq"]}
    repo = load_params()
    judged = {s for pair in repo.evaluation.judge_subject_pairs for s in pair}  # Fig. 4 pairs: also their datasets
    assert {s for s in repo.llm.subjects if subject_datasets(repo, s) == ["clarifymt"]} == set(repo.llm.subjects) - {
        "smollm2"} - judged
    extra = {"clarifymt", *repo.evaluation.judge_subject_datasets}
    assert {s: subject_datasets(repo, s) for s in judged} == dict.fromkeys(
        judged, [d for d in repo.evaluation.datasets if d in extra])
    data["evaluation"] |= {"judge_subject_pairs": [["sft", "base_hf"]], "judge_subject_datasets": ["clarifymt"]}
    pair = parse_params(data)
    assert subject_datasets(pair, "sft") == subject_datasets(pair, "base_hf") == ["clarifymt", "clariq"]


def test_the_predictions_stage_runs_once_per_rectangle_of_planned_keys_with_the_rows_of_one_run_per_key(
        tmp_path, monkeypatch):
    """smollm2 x {base, cot} and sft x base: two runs (base x both subjects, cot x smollm2) instead of three, each
    key with its own rows and usage metadata, equal to what one run per key writes."""
    from dagster_project.runs.group_runs import _stage_runs

    monkeypatch.chdir(tmp_path)
    SCRIPTED["backend"] = ScriptedBackend(eval_responder)
    path = _params(tmp_path)
    defs = _defs(path)
    graph = defs.resolve_asset_graph()
    key = dg.AssetKey(["evaluation", "predictions"])
    pdef = graph.get(key).partitions_def
    planned = planned_partitions(load_params(path))
    instance = dg.DagsterInstance.ephemeral()
    ranged = _stage_runs(graph, pdef, [key], planned, instance)
    assert len(planned) == 3 and len(ranged) == 2 and all(pk is None and tags for pk, tags in ranged)
    assert len(_stage_runs(graph, pdef, [key], planned, instance, parallel=True)) == 3  # runs in processes: per key
    assert all(r.success for r in materialize_group(defs, "benchmark", instance))
    results = materialize_group(defs, "evaluation", instance, planned)
    assert all(r.success for r in results) and len(results) == 1 + 2 + 1  # inputs, predictions, the rest
    folder = tmp_path / "assets" / "evaluation" / "predictions"
    ranged_rows = {str(k): pl.read_parquet(folder / f"method={k.keys_by_dimension['method']}" /
                                           f"subject={k.keys_by_dimension['subject']}" / "data.parquet")
                   for k in map(pdef.get_partition_key_from_str, planned)}
    meta = {str(r.partition_key): r.asset_materialization.metadata
            for r in instance.fetch_materializations(key, limit=100).records}
    assert {k: meta[k]["rows"].value for k in ranged_rows} == {k: f.height for k, f in ranged_rows.items()}
    assert meta["base|sft"]["llm/requests"].value == 0 < meta["base|smollm2"]["llm/requests"].value  # per key
    job = defs.resolve_implicit_global_asset_job_def()
    for k in planned:  # one run per key, as before: the same rows (answers come from the LLM cache)
        assert job.execute_in_process(asset_selection=[key], partition_key=k, instance=instance).success
    for k, frame in ranged_rows.items():
        k = pdef.get_partition_key_from_str(k)
        again = pl.read_parquet(folder / f"method={k.keys_by_dimension['method']}" /
                                f"subject={k.keys_by_dimension['subject']}" / "data.parquet")
        timing = ["latency_s", "cache_hits"]  # the second pass is served from the LLM cache
        assert frame.height > 0 and again.drop(timing).equals(frame.drop(timing))
