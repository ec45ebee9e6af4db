"""The `training` group in-process on tiny hand-made exports: every model asset reads its export, the wiring
(rows, SFT -> DPO adapter, intents sweep, an unwritten export -> skipped_no_data with its reason) with the LM
trainer faked (tests/lib/test_lm_training.py trains for real), and a real 1-step re-ranker fine-tune + eval. The
double-turn DPO chain (it samples the SFT model through the LLM resource) is tests/defs/test_training_dpo_candidates.py."""

import json

import dagster as dg
import polars as pl
import pytest

from dagster_project.config import parse_params
from dagster_project.core.double_turn.exports import turn2_prompt
from dagster_project.core.intents.curation import TRAINING_SCHEMA
from dagster_project.defs.quality.checks import build_checks
from dagster_project.defs.training import assets as training
from dagster_project.training.model_folder import result_row
from dagster_project.lib.io_manager import WarehouseIOManager


def m(role, content):
    return {"role": role, "content": content}


PARAMS = {"intents": {"sweep_train": True, "sweep_percentiles": [100.0, 50.0]},
          "training": {"reranker": {"max_steps": 1, "batch_size": 2, "max_length": 32}}}
SYSTEM = parse_params(PARAMS).annotations.system_prompt  # the exports are rendered in each model's template
OUTPUT = parse_params(PARAMS).double_turn.subject_output


def _write_exports(root):
    a = root / "assets"
    for g in ("annotations", "double_turn/exports", "intents", "retrieval", "logs"):
        (a / g).mkdir(parents=True, exist_ok=True)
    pl.DataFrame({"candidate_id": ["c1:0>1", "c2:0>1"], "kept": [True, False], "q_i": ["Plan a trip.", "Hi"],
                  "c": ["Where are you going?", None], "facet": ["destination", None]}
                 ).write_parquet(a / "logs/log_clarifications.parquet")
    pl.DataFrame({"id": ["q1", "q2"], "messages": [[m("system", SYSTEM), m("user", "jaguar?"),
                                                    m("assistant", "Need clarification: yes\nAnimal or car?")],
                                                   [m("system", SYSTEM), m("user", "2+2?"),
                                                    m("assistant", "Need clarification: no\n4")]],
                  "question_source": ["log", "generated"]}
                 ).write_parquet(a / "annotations/sft_dataset.parquet")
    # ClariLM's SFT-IN3 baseline: imported rows, one not kept (an evaluation query)
    pl.DataFrame({"id": ["in3:0", "in3:1"], "kept": [True, False],
                  "messages": [[m("system", SYSTEM), m("user", "Plan a trip."),
                                m("assistant", "Need clarification: yes\nWhere to?")],
                               [m("system", SYSTEM), m("user", "jaguar?"),
                                m("assistant", "Need clarification: yes\nAnimal or car?")]]}
                 ).write_parquet(a / "annotations/sft_external_dataset.parquet")
    pl.DataFrame({"id": ["p1"], "prompt": [[m("system", SYSTEM), m("user", "jaguar?")]],
                  "chosen": [[m("assistant", "Animal or car?")]],
                  "rejected": [[m("assistant", "A cat.")]]}).write_parquet(a / "annotations/dpo_dataset.parquet")
    sft = {"messages": [*turn2_prompt("clarify_or_direct", "who wrote it?", OUTPUT), m("assistant", "Mary Shelley")]}
    (a / "double_turn/exports/sft_dataset.jsonl").write_text(json.dumps(sft) + "\n")
    pl.DataFrame({"export": ["dpo_dataset", "dpo_single_turn", "sft_dataset"],
                  "path": ["assets/double_turn/exports/dpo_dataset.jsonl",
                           "assets/double_turn/exports/dpo_single_turn.jsonl",
                           "assets/double_turn/exports/sft_dataset.jsonl"],
                  "rows": [0, 0, 1], "written": [False, False, True],
                  "reason": ["empty: no kept rows", "empty: no kept rows", None]}
                 ).write_parquet(a / "double_turn/training_exports.parquet")
    conv = [{"conversation_id": f"c{i}", "label_dropout": False, "sdrs": s, "outcome": "correct", "kept": k,
             "messages": [m("system", "intents"), m("user", f"u{i}"), m("assistant", "which order?"),
                          m("user", "the last"), m("assistant", "track_order")]}
            for i, (s, k) in enumerate([(0.9, True), (0.5, True), (0.1, False)])]
    pl.DataFrame(conv, schema={k: TRAINING_SCHEMA[k] for k in conv[0]}).write_parquet(
        a / "intents/training_conversations.parquet")
    docs = {"d1": "red running shoes for trail", "d2": "green wool socks", "d3": "a blue summer hat",
            "d4": "black leather boots"}
    pl.DataFrame({"doc_id": list(docs), "title": [None] * 4, "text": list(docs.values())}).write_parquet(
        a / "retrieval/documents.parquet")
    ex = [("q1|d1", "running shoes", "train", "d1", ["d2", "d4"]), ("q2|d3", "summer hat", "train", "d3", ["d4"]),
          ("q3|d4", "leather boots", "test", "d4", ["d1", "d2"])]
    pl.DataFrame([{"example_id": e, "query_id": e.split("|")[0], "query_text": q, "split": s, "kept": True,
                   "positive_doc_id": p, "negative_doc_ids": n, "candidate_doc_ids": [p, *n]} for e, q, s, p, n in ex]
                 ).write_parquet(a / "retrieval/reranker_training.parquet")
    pl.DataFrame({"query_id": ["q1", "q2", "q3"], "conversation": [f"User: {q}" for _, q, *_ in ex]}).write_parquet(
        a / "retrieval/inferred_queries.parquet")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("training")
    mp = pytest.MonkeyPatch()
    jobs = []

    def fake_train(job, cfg, root):
        jobs.append(job)
        if not job.rows:
            return result_row(job.name, job.kind, "skipped_no_data", job.data_asset, 0, "no rows")
        meta = {"steps": 1, "final_loss": 0.5, "wall_s": 0.1, "data": {"sha256": "x"}}
        return result_row(job.name, job.kind, "trained", job.data_asset, len(job.rows), None, meta, root / job.name)

    try:
        mp.chdir(tmp)
        mp.setattr(training, "train_lm", fake_train)
        _write_exports(tmp)
        params = parse_params(PARAMS)
        built = [a for a in training.build(params).assets  # the double-turn DPO chain has its own test file
                 if not any(k.path[-1].startswith(("double_turn_dpo", "single_turn_dpo")) for k in a.keys)]
        upstream = {k for a in built for k in a.dependency_keys} - {k for a in built for k in a.keys}
        checks = build_checks({k for a in built for k in a.keys})
        result = dg.materialize([*built, *checks, *(dg.SourceAsset(k) for k in upstream)],
                                resources={"io_manager": WarehouseIOManager(), "params": params})
    finally:
        mp.undo()
    return tmp, result, {j.name: j for j in jobs}


def _read(tmp, name):
    return pl.read_parquet(tmp / f"assets/training/{name}.parquet")


def test_every_model_asset_reads_its_export(built):
    tmp, result, jobs = built
    assert result.success
    evaluations = result.get_asset_check_evaluations()
    assert len(evaluations) == 7 and all(e.passed for e in evaluations)
    assert sorted(jobs) == ["clarilm_dpo", "clarilm_sft", "clarilm_sft_external", "clarilm_sft_full", "clarilm_sft_ql",
                            "double_turn_sft", "fm_log", "intents_tuned", "intents_tuned_p100", "intents_tuned_p50",
                            "reranker_generative"]
    # ClariLM's SFT baselines: SFT-IN3 = the kept imported row; Q^L only = the logged question; full = both sets
    assert [len(jobs[n].rows) for n in ("clarilm_sft_external", "clarilm_sft_ql", "clarilm_sft_full")] == [1, 1, 3]
    assert jobs["clarilm_sft_ql"].rows[0]["prompt"][-1] == m("user", "jaguar?")
    # FM-LOG: the one kept log pair, then the six positive demonstrations of the two extraction prompts
    fm = jobs["fm_log"]
    assert fm.kind == "sft" and fm.data_asset == "logs/log_clarifications" and len(fm.rows) == 7
    assert fm.rows[0]["completion"] == [m("assistant", '{"facet": "destination", "clarifying_question": '
                                                       '"Where are you going?"}')]
    assert 'New request: "Plan a trip."' in fm.rows[0]["prompt"][-1]["content"]
    assert len(jobs["clarilm_sft"].rows) == 2 and jobs["clarilm_sft"].kind == "sft"
    assert jobs["clarilm_sft"].rows[0]["completion"] == [m("assistant", "Need clarification: yes\nAnimal or car?")]
    assert len(jobs["clarilm_dpo"].rows) == 1 and jobs["clarilm_dpo"].kind == "dpo"
    assert str(jobs["clarilm_dpo"].init_adapter) == "assets/training/clarilm_sft/adapter"
    # the paper's chain starts with SFT on the SFT-stage export
    assert len(jobs["double_turn_sft"].rows) == 1 and jobs["double_turn_sft"].kind == "sft"


def test_intents_sweep_trains_one_model_per_percentile(built):
    tmp, _, jobs = built
    # two assistant turns per conversation -> two prompt/completion rows each
    assert [len(jobs[n].rows) for n in ("intents_tuned", "intents_tuned_p100", "intents_tuned_p50")] == [4, 6, 4]
    table = _read(tmp, "intents_tuned")
    assert table["model"].to_list() == ["intents_tuned", "intents_tuned_p100", "intents_tuned_p50"]


def test_an_unwritten_export_is_skipped_with_its_reason(built):
    tmp, _, _ = built
    table = pl.read_parquet(tmp / "assets/double_turn/training_exports.parquet")
    records, source, why = training._export_rows(table, "dpo_single_turn")
    assert records == [] and source == "double_turn/training_exports:dpo_single_turn"
    assert why == "double_turn export dpo_single_turn not written (empty: no kept rows)"
    assert training._export_rows(table, "nope")[2] == "double_turn/training_exports lists no export 'nope'"


def test_the_generative_reranker_learns_yes_and_no_on_the_train_split_only(built):
    _, _, jobs = built
    job = jobs["reranker_generative"]
    assert job.kind == "sft" and job.data_asset == "retrieval/reranker_training"
    # one BM25 negative per relevant document (training.yes_no_reranker.negatives), test query q3 left out
    assert [r["completion"] for r in job.rows] == [[m("assistant", y)] for y in ("yes", "no", "yes", "no")]
    users = [r["prompt"][-1]["content"] for r in job.rows]
    assert "User: running shoes" in users[0] and "red running shoes for trail" in users[0]
    assert "green wool socks" in users[1] and not any("leather boots" in u.split("Document:")[0] for u in users)


def test_reranker_is_fine_tuned_and_compared_with_the_base(built):
    tmp, _, _ = built
    row = _read(tmp, "reranker_finetuned").row(0, named=True)
    assert row["status"] == "trained" and row["steps"] == 1 and row["rows"] == 2
    folder = tmp / "assets/training/reranker_finetuned"
    assert (folder / "training.json").is_file() and (folder / "loss_curve.parquet").is_file()
    assert (folder / "config_sentence_transformers.json").is_file()
    ev = _read(tmp, "reranker_eval")
    assert ev["ranker"].to_list() == ["minilm_base", "minilm_finetuned"] and ev["n_queries"].to_list() == [1, 1]
    assert {"mrr", "ndcg_at_1", "p_at_1"} <= set(ev.columns) and ev["mrr"].is_between(0, 1).all()


def test_only_the_models_named_in_params_are_assets():
    defs = training.build(parse_params({"training": {"models": ["clarilm_dpo"]}}))
    keys = {k.to_user_string(): a for a in defs.assets for k in a.keys}
    assert list(keys) == ["training/clarilm_dpo"]
    assert {k.to_user_string() for k in keys["training/clarilm_dpo"].dependency_keys} == {"annotations/dpo_dataset"}


def test_every_lm_records_the_template_of_its_export(built):
    _, _, jobs = built
    params = parse_params(PARAMS)
    dt = "double_turn_json" if params.double_turn.subject_output == "json" else "double_turn_text"
    parsers = {n: j.template["parser"] for n, j in jobs.items()}
    clarilm = ("clarilm_sft", "clarilm_dpo", "clarilm_sft_external", "clarilm_sft_ql", "clarilm_sft_full")
    assert parsers == {**dict.fromkeys(clarilm, "clarilm_need_clarification"), "double_turn_sft": dt,
                       "intents_tuned": "intent_name", "fm_log": "fm_log_facet",
                       "intents_tuned_p100": "intent_name", "intents_tuned_p50": "intent_name",
                       "reranker_generative": "yes_no"}
    assert jobs["clarilm_sft"].template["system"] == params.annotations.system_prompt


def test_dpo_is_skipped_with_the_reason_when_its_sft_stage_built_no_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    jobs = []
    monkeypatch.setattr(training, "train_lm", lambda job, cfg, root: jobs.append(job) or result_row(
        job.name, job.kind, "skipped_no_data", job.data_asset, 0, "annotations/sft_dataset has no training rows"))
    a = tmp_path / "assets/annotations"
    a.mkdir(parents=True)
    pl.DataFrame({"messages": [[m("user", "x")]]}).head(0).write_parquet(a / "sft_dataset.parquet")
    dpo = {"id": ["p1"], "prompt": [[m("system", SYSTEM), m("user", "jaguar?")]],
           "chosen": [[m("assistant", "Animal or car?")]], "rejected": [[m("assistant", "A cat.")]]}
    pl.DataFrame(dpo).write_parquet(a / "dpo_dataset.parquet")
    params = parse_params({"training": {"models": ["clarilm_sft", "clarilm_dpo"]}})
    defs = training.build(params)
    sources = [dg.SourceAsset(dg.AssetKey(["annotations", n])) for n in ("sft_dataset", "dpo_dataset")]
    resources = {"io_manager": WarehouseIOManager(), "params": params}
    result = dg.materialize([*defs.assets, *sources], resources=resources)
    assert result.success and [j.name for j in jobs] == ["clarilm_sft"]  # DPO never started from the base
    row = _read(tmp_path, "clarilm_dpo").row(0, named=True)
    assert row["status"] == "skipped_no_data" and row["rows"] == 1 and row["folder"] is None
    assert row["reason"] == ("clarilm_dpo continues clarilm_sft, which built no model (skipped_no_data: "
                             "annotations/sft_dataset has no training rows); not trained from the base instead")


def test_an_export_row_in_another_template_fails_naming_the_row(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(training, "train_lm", lambda job, cfg, root: pytest.fail("must not train"))
    (tmp_path / "assets/annotations").mkdir(parents=True)
    pl.DataFrame({"messages": [[m("system", SYSTEM), m("user", "a?"), m("assistant", "Need clarification: no\nb")],
                               [m("system", "An older prompt."), m("user", "jaguar?"), m("assistant", "x")]]}
                 ).write_parquet(tmp_path / "assets/annotations/sft_dataset.parquet")
    params = parse_params({"training": {"models": ["clarilm_sft"]}})
    source = dg.SourceAsset(dg.AssetKey(["annotations", "sft_dataset"]))
    result = dg.materialize([*training.build(params).assets, source], raise_on_error=False,
                            resources={"io_manager": WarehouseIOManager(), "params": params})
    assert not result.success
    error = str(next(e for e in result.all_events if e.is_step_failure).event_specific_data.error)
    assert "annotations/sft_dataset" in error and "training row 2" in error and "An older prompt." in error
