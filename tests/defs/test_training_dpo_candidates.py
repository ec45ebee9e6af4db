"""The double-turn DPO chain of the training group (paper §4.1) with scripted models: the DPO-stage candidates are asked
of training/double_turn_sft in the prompt it learned, the users / answerer / judge label them with the double_turn
core steps, and the DPO exports and both DPO models come from those candidates (training faked, as in
tests/defs/test_training.py). The scripted world is tests/defs/test_double_turn.py's."""

import json

import dagster as dg
import polars as pl
import yaml
from defs.test_double_turn import GOOD_CQ, Q1, Q2, Q3, _write_inputs, world
from fakes import ScriptedBackend

from dagster_project.config import load_params
from dagster_project.core.double_turn.exports import turn2_prompt
from dagster_project.core.training.template import double_turn_template
from dagster_project.defs.double_turn import assets as double_turn
from dagster_project.defs.training import assets as training
from dagster_project.lib.resources import LLMResource
from dagster_project.lib.io_manager import WarehouseIOManager
from dagster_project.training.exports import trained_on
from dagster_project.training.model_folder import RESULT_SCHEMA, result_row

SFT_MODEL = "training/double_turn_sft"
OUTPUT = "json"
# what the scripted SFT model writes per question when its reply schema fixes the action (JSON): the greedy
# clarifying question, then its two samples; and its one greedy direct answer
SFT_QUESTIONS = {Q1: (GOOD_CQ, "not json", GOOD_CQ), Q2: ("Do you mean the novel?", "Which Frankenstein?",
                                                          "Do you mean the novel?"),
                 Q3: ("Which Canada do you mean?",) * 3}
SFT_ANSWERS = {Q1: "James Cameron", Q2: "Mary Shelley", Q3: "Ottawa"}
# what it replies in free text, deciding itself: greedy, then its two samples
SFT_FREE_TEXT = {Q1: (f"Clarifying Question: {GOOD_CQ}", "James Cameron", f"Clarifying Question: {GOOD_CQ}"),
                 Q2: ("Mary Shelley", "Clarifying Question: Do you mean the novel?", "Clarifying Question:"),
                 Q3: ("Ottawa",) * 3}


def sft_model(job, idx: int) -> str:
    question = next(q for q in SFT_ANSWERS if q in job.messages[-1]["content"])
    k = 0 if job.sampling["temperature"] == 0 else 1 + idx
    if job.json_schema is None:
        return SFT_FREE_TEXT[question][k]
    action = job.json_schema["properties"]["action"]["const"]  # the asset fixes it
    text = SFT_ANSWERS[question] if action == "answer" else SFT_QUESTIONS[question][k]
    return text if text == "not json" else json.dumps({"action": action, "text": text})


def _sft_folder(root, status: str, output: str) -> None:
    folder = root / "assets/training/double_turn_sft"
    (folder / "adapter").mkdir(parents=True)
    (folder / "adapter/adapter_config.json").write_text("{}")
    (folder / "training.json").write_text(json.dumps({"base_model": "smollm2-135m-instruct",
                                                      "template": double_turn_template(output).record()}))
    pl.DataFrame([{"model": "double_turn_sft", "kind": "sft", "status": status, "reason": "test"}],
                 schema=RESULT_SCHEMA).write_parquet(root / "assets/training/double_turn_sft.parquet")


def _run(tmp_path, monkeypatch, sft_status: str = "trained", models=("double_turn_sft", "double_turn_dpo",
                                                                       "single_turn_dpo"), output: str = OUTPUT):
    monkeypatch.chdir(tmp_path)
    _write_inputs(tmp_path)
    _sft_folder(tmp_path, sft_status, output)
    data = {"llm": {"cache_path": str(tmp_path / "cache.sqlite")},
            "training": {"models": list(models)},
            "double_turn": {"inputs": [{"path": "ambig.json", "format": "ambigqa", "split": "train"},
                                       {"path": "nq.jsonl", "format": "nq_open", "split": "train"},
                                       {"path": "ambig_eval.json", "format": "ambigqa", "split": "eval"}],
                            "max_queries": None, "sft_fraction": None, "n_clarify_sampled": 2,
                            "subject_output": output}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(data))
    params = load_params(tmp_path / "params.yaml")
    sent: dict[str, ScriptedBackend] = {}

    def backend(cfg):
        return sent.setdefault(cfg.model, ScriptedBackend(sft_model if cfg.model == SFT_MODEL else world))

    jobs = []

    def fake_train(job, cfg, root):
        jobs.append(job)
        if not job.rows:
            return result_row(job.name, job.kind, "skipped_no_data", job.data_asset, 0, "no rows")
        return result_row(job.name, job.kind, "trained", job.data_asset, len(job.rows), None,
                          {"steps": 1, "final_loss": 0.5, "wall_s": 0.1, "data": {"sha256": "x"}}, root / job.name)

    monkeypatch.setattr(training, "train_lm", fake_train)
    built = [a for a in training.build(params).assets if dg.AssetKey(["training", "double_turn_sft"]) not in a.keys]
    selection = [k for a in built for k in a.keys] + [dg.AssetKey(["double_turn", "qa_sets"]),
                                                      dg.AssetKey(["double_turn", "qa_sets_rejected"])]
    result = dg.materialize([*dg.load_assets_from_modules([double_turn]), *built,
                             dg.SourceAsset(dg.AssetKey(["training", "double_turn_sft"]))],
                            selection=selection,
                            resources={"io_manager": WarehouseIOManager(), "params": params,
                                       "llm": LLMResource(params.llm, backends={"llamacpp": backend,
                                                                                "transformers": backend})})
    return result, sent, {j.name: j for j in jobs}


def _read(tmp_path, name: str) -> pl.DataFrame:
    return pl.read_parquet(tmp_path / f"assets/training/{name}.parquet")


def test_dpo_candidates_come_from_the_sft_model_and_the_dpo_models_learn_from_them(tmp_path, monkeypatch):
    result, sent, jobs = _run(tmp_path, monkeypatch)
    assert result.success
    assert all(c.passed for c in result.get_asset_check_evaluations())
    # the SFT model got every candidate request, each in the Clarify-or-Direct prompt it was trained on; the
    # paper's set per query: a greedy and (one request for) 2 sampled clarifying questions, one greedy direct answer
    template = double_turn_template(OUTPUT)
    asked = sent[SFT_MODEL].jobs
    assert len(asked) == 9  # 3 DPO-stage queries x 3 requests
    assert all(template.mismatch(list(j.messages)) is None for j in asked)
    shape = sorted((j.json_schema["properties"]["action"]["const"], j.sampling["temperature"], len(j.sample_indices))
                   for j in asked)
    assert shape == [("answer", 0.0, 1)] * 3 + [("clarify", 0.0, 1)] * 3 + [("clarify", 1.0, 2)] * 3
    # ... and the prompted clarifier / answerer were not asked for candidates
    prompted = [j for j in sent["smollm2-135m-instruct"].jobs
                if "clarifying_question" in (j.json_schema or {}).get("properties", {})
                or "Now answer this question" in j.messages[-1]["content"]]
    assert prompted == []

    cands = _read(tmp_path, "double_turn_dpo_candidates").sort("candidate_id")
    assert set(cands["model"]) == {SFT_MODEL}
    c1_reason = cands.filter(pl.col("candidate_id") == "q1:c1")["reason"][0]
    assert cands.select("candidate_id", "kind", "in_pairs", "reason").rows() == [
        ("q1:c0", "clarify", True, None), ("q1:c1", "unusable", False, c1_reason),
        ("q1:c2", "clarify", False, "duplicate of q1:c0"), ("q1:d", "direct", True, None),
        ("q2:c0", "clarify", True, None), ("q2:c1", "clarify", True, None),
        ("q2:c2", "clarify", False, "duplicate of q2:c0"), ("q2:d", "direct", True, None),
        ("q3:c0", "clarify", True, None), ("q3:c1", "clarify", False, "duplicate of q3:c0"),
        ("q3:c2", "clarify", False, "duplicate of q3:c0"), ("q3:d", "direct", True, None)]
    assert c1_reason.startswith("parse_error: invalid JSON")

    # double-turn labels: q1's question serves both readings (1.0) over the answer (0.5); q2's questions tie with
    # the answer -> the answer; q3's question leaks the answer (0) -> the answer
    pairs = _read(tmp_path, "double_turn_dpo_pairs").filter(pl.col("kept") & (pl.col("labeling") == "double_turn"))
    assert sorted(pairs.select("chosen_id", "rejected_id").rows()) == [
        ("q1:c0", "q1:d"), ("q2:d", "q2:c0"), ("q2:d", "q2:c1"), ("q3:d", "q3:c0")]
    exports = _read(tmp_path, "double_turn_dpo_exports")
    rows = dict(zip(exports["export"], exports["rows"], strict=True))
    assert rows["dpo_dataset"] == 4 and exports["written"].any()

    # both DPO models train on those exports, from the SFT adapter
    dt, st = jobs["double_turn_dpo"], jobs["single_turn_dpo"]
    assert dt.data_asset == "training/double_turn_dpo_exports:dpo_dataset"
    assert str(dt.init_adapter) == str(st.init_adapter) == "assets/training/double_turn_sft/adapter"
    by_prompt = {r["prompt"][-1]["content"]: r for r in dt.rows}
    q1 = by_prompt[turn2_prompt("clarify_or_direct", Q1, OUTPUT)[-1]["content"]]
    assert json.loads(q1["chosen"][0]["content"]) == {"action": "clarify", "text": GOOD_CQ}
    assert json.loads(q1["rejected"][0]["content"]) == {"action": "answer", "text": "James Cameron"}
    q3 = by_prompt[turn2_prompt("clarify_or_direct", Q3, OUTPUT)[-1]["content"]]
    assert json.loads(q3["chosen"][0]["content"]) == {"action": "answer", "text": "Ottawa"}
    # the held-out check compares the evaluation queries with these exports
    assert trained_on("double_turn_dpo")[0] == "training/double_turn_dpo_exports:dpo_dataset"
    assert trained_on("single_turn_dpo")[0] == "training/double_turn_dpo_exports:dpo_single_turn"


def test_free_text_candidates_are_read_as_the_sft_model_decided(tmp_path, monkeypatch):
    """Free-text replies carry no schema to fix the action: greedy + sampled replies, each a question or an answer
    as the model wrote it, one direct answer per query in the pairs (greedy first)."""
    result, sent, jobs = _run(tmp_path, monkeypatch, output="free_text")
    assert result.success
    asked = sent[SFT_MODEL].jobs
    assert all(j.json_schema is None for j in asked)
    assert sorted(len(j.sample_indices) for j in asked) == [1, 1, 1, 2, 2, 2]
    cands = _read(tmp_path, "double_turn_dpo_candidates").sort("candidate_id")
    assert cands.select("candidate_id", "kind", "in_pairs", "reason").rows() == [
        ("q1:r0", "clarify", True, None), ("q1:r1", "direct", True, None),
        ("q1:r2", "clarify", False, "duplicate of q1:r0"),
        ("q2:r0", "direct", True, None), ("q2:r1", "clarify", True, None),
        ("q2:r2", "unusable", False, "parse_error: empty clarifying question"),
        ("q3:r0", "direct", True, None),
        ("q3:r1", "direct", False, "one direct answer per query: q3:r0 is in the pairs"),
        ("q3:r2", "direct", False, "one direct answer per query: q3:r0 is in the pairs")]
    pairs = _read(tmp_path, "double_turn_dpo_pairs").filter(pl.col("kept") & (pl.col("labeling") == "double_turn"))
    assert sorted(pairs.select("chosen_id", "rejected_id").rows()) == [("q1:r0", "q1:r1"), ("q2:r0", "q2:r1")]
    by_prompt = {r["prompt"][-1]["content"]: r for r in jobs["double_turn_dpo"].rows}
    q1 = by_prompt[turn2_prompt("clarify_or_direct", Q1, "free_text")[-1]["content"]]
    assert q1["chosen"][0]["content"] == f"Clarifying Question: {GOOD_CQ}"


def test_no_sft_model_no_candidates_and_dpo_is_skipped_with_the_reason(tmp_path, monkeypatch):
    result, sent, jobs = _run(tmp_path, monkeypatch, sft_status="skipped_no_data")
    assert result.success
    assert SFT_MODEL not in sent and _read(tmp_path, "double_turn_dpo_candidates").is_empty()
    for name in ("double_turn_dpo", "single_turn_dpo"):
        row = _read(tmp_path, name).row(0, named=True)
        assert row["status"] == "skipped_no_data" and name not in jobs
        assert row["reason"].startswith(f"{name} continues double_turn_sft, which built no model")


def test_dpo_without_an_sft_stage_is_skipped_not_trained_from_the_base(tmp_path, monkeypatch):
    result, sent, jobs = _run(tmp_path, monkeypatch, models=("double_turn_dpo", "single_turn_dpo"))
    assert result.success and not jobs and SFT_MODEL not in sent
    row = _read(tmp_path, "double_turn_dpo").row(0, named=True)
    assert row["status"] == "skipped_no_data" and "add double_turn_sft to training.models" in row["reason"]
