"""ClariLM Table 2's SFT baselines (core/clarilm/sft_baselines.py): the imported-dataset export (SFT-IN3) and the rows
each variant trains on, in clarilm_sft's template (scripted answerer; no model, no Dagster)."""

import json
from pathlib import Path

import polars as pl
from dagster_project.config import parse_params
from dagster_project.core.clarilm.annotations import format_response
from dagster_project.core.clarilm.sft_baselines import baseline_rows, external_sft_rows
from dagster_project.core.clarifymt.external import import_dataset
from dagster_project.core.training.formats import trl_sft_rows
from dagster_project.llm.chat import ChatResult
from dagster_project.training.exports import model_template

DATA = Path(__file__).resolve().parents[2] / "data" / "external"
SYSTEM = "Decide. Start with 'Need clarification: yes' or 'Need clarification: no'."


def answerer(fail: bool = False):
    """chat(role, requests): the answerer's JSON reply (or an error); `chat.sent` keeps (role, request)."""
    def chat(role, requests):
        chat.sent += [(role, r) for r in requests]
        return [ChatResult(texts=[""], error="down") if fail else
                ChatResult(texts=[json.dumps({"answer": "It boils at 100 degrees."})]) for _ in requests]
    chat.sent = []
    return chat


def _in3_train():
    return import_dataset("in3_train", "in3", DATA / "in3_train_sample.jsonl", key="annotations.sft_external.in3_train")


def test_the_in3_training_sample_imports_with_its_bad_record_quarantined():
    res = _in3_train()
    assert (res.records, res.turns.height, len(res.rejected)) == (9, 8, 1)
    assert res.rejected.rows[0]["field"] == "vague"


def test_external_export_labels_come_from_the_dataset_and_answers_from_the_answerer():
    chat = answerer()
    out = external_sft_rows(chat, _in3_train().turns, SYSTEM, ["Plan a weekend trip for me!"], 64)
    assert out.height == 8  # every imported turn is a row
    kept = out.filter(pl.col("kept"))
    assert kept.height == 7 and out.filter(~pl.col("kept"))["reason"].to_list() == ["in_evaluation_set"]
    # one answerer call per kept answer turn (the two non-vague tasks), none for clarify turns
    assert [r for r, _ in chat.sent] == ["answerer", "answerer"]
    by_q = {r["question"]: r for r in kept.iter_rows(named=True)}
    budget = by_q["Help me make a monthly budget."]
    assert budget["decision"] == "ask" and budget["target_origin"] == "dataset"
    assert budget["messages"] == [
        {"role": "system", "content": SYSTEM}, {"role": "user", "content": "Help me make a monthly budget."},
        {"role": "assistant", "content": format_response(
            "clarify", "Roughly how much do you earn each month after tax? "
                       "Are you saving for something in particular?")}]
    water = by_q["What is the boiling point of water at sea level in Celsius?"]
    assert water["decision"] == "answer" and water["target_origin"] == "answerer"
    assert water["messages"][-1]["content"] == "Need clarification: no\nIt boils at 100 degrees."
    assert set(kept["question_source"]) == {"external:in3_train"}
    # every kept row is in the template clarilm models record, so training accepts it
    template = model_template("clarilm_sft_external", parse_params({"annotations": {"system_prompt": SYSTEM}}))
    for row in trl_sft_rows(kept.select("messages").to_dicts(), "t"):
        assert template.mismatch(row["prompt"]) is None


def test_a_failed_answer_is_a_row_that_is_not_kept_with_its_status():
    out = external_sft_rows(answerer(fail=True), _in3_train().turns, SYSTEM, [], 64)
    failed = out.filter(pl.col("reason") == "answer_failed")
    assert failed.height == 2 and set(failed["status"]) == {"llm_error"} and failed["messages"].is_null().all()
    assert out.filter(pl.col("kept")).height == 6


def test_a_clarify_turn_without_a_question_is_not_kept():
    turns = _in3_train().turns.with_columns(
        reference_question=pl.when(pl.col("dialogue_id").str.ends_with("000002")).then(None)
        .otherwise(pl.col("reference_question")))
    out = external_sft_rows(answerer(), turns, SYSTEM, [], 64)
    assert out.filter(pl.col("reason") == "no_reference_question")["question"].to_list() == [
        "Suggest a dinner recipe."]


def _sft_dataset():
    msgs = lambda q, a: [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q},  # noqa: E731
                         {"role": "assistant", "content": a}]
    return pl.DataFrame({"id": ["l1", "g1", "l2"], "question_source": ["log", "generated", "log"],
                         "messages": [msgs("log q1", "Need clarification: no\na"), msgs("gen q", "Need clarification: "
                                                                                     "yes\nwhich?"),
                                      msgs("log q2", "Need clarification: no\nb")]})


def test_each_variant_trains_on_its_own_rows():
    sft = _sft_dataset()
    ext = external_sft_rows(answerer(), _in3_train().turns, SYSTEM, [], 64)
    users = lambda recs: [m["content"] for r in recs for m in r["messages"] if m["role"] == "user"]  # noqa: E731
    assert users(baseline_rows("clarilm_sft_ql", sft, None)) == ["log q1", "log q2"]
    external = baseline_rows("clarilm_sft_external", None, ext)
    assert len(external) == ext.filter(pl.col("kept")).height == 8
    full = baseline_rows("clarilm_sft_full", sft, ext)
    assert users(full)[:3] == ["log q1", "gen q", "log q2"] and len(full) == 3 + 8
