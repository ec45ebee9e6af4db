"""Importers for external clarification datasets (io/formats/, core/clarifymt/external.py) on data/external/."""

import json
from pathlib import Path

import polars as pl
import pytest

from dagster_project.core.clarifymt.external import PERSONA_ALIASES, import_dataset
from dagster_project.io.formats.clamber import read_clamber
from dagster_project.io.formats.clariq import read_clariq
from dagster_project.io.formats.dialogues import read_generic
from dagster_project.io.formats.in3 import inquiries, read_in3
from dagster_project.io.records import InputFileError

DATA = Path(__file__).resolve().parents[2] / "data" / "external"


def test_clamber_plain_and_string_encoded_lines():
    r = read_clamber(DATA / "clamber_sample.jsonl", "clamber")
    assert r.records == 8  # 9 lines, the blank one is not a record
    t = r.turns
    assert t["dialogue_id"].to_list() == ["clamber-000001", "clamber-000002", "clamber-000003", "clamber-000009"]
    assert t["reference_action"].to_list() == ["clarify", "answer", "clarify", "answer"]
    # line 3 holds a JSON string that itself contains the object; its context is prepended
    third = t.row(2, named=True)
    assert third["messages"] == [{"role": "user", "content": "We talked about the conference last week.\n\n"
                                                             "Give me the schedule."}]
    assert third["reference_question"] == "Which day of the conference do you want the schedule for?"
    assert third["subtype"] == "when"
    assert t.row(1, named=True)["reference_question"] is None  # only clarify turns keep a reference question
    assert set(t["turn"]) == {1} and set(t["status"]) == {"ok"}


def test_clamber_keeps_its_category_and_a_null_subtype_for_unambiguous_rows():
    t = read_clamber(DATA / "clamber_sample.jsonl", "clamber").turns
    assert t["category"].to_list() == ["MC", "FD", "LA", "FD"]
    assert t["subtype"].to_list() == ["whom", None, "when", None]  # not the string "none"
    assert t.filter(pl.col("reference_action") == "answer")["subtype"].null_count() == 2


def test_in3_sample_vague_tasks_clarify_with_every_inquiry_most_important_first():
    r = read_in3(DATA / "in3_sample.jsonl", "in3")
    t = r.turns
    assert r.records == 6 and t["dialogue_id"].to_list() == ["in3-000001", "in3-000002", "in3-000003"]
    assert t["reference_action"].to_list() == ["clarify", "answer", "clarify"]
    assert t["reference_question"].to_list() == [
        "Where would you like to go? What budget do you have in mind?", None, "Do you run on roads or trails?"]
    assert t["category"].to_list() == ["Travel", "Cooking", "Shopping"] and t["subtype"].null_count() == 3
    assert t["messages"][0].to_list() == [{"role": "user", "content": "Plan a weekend trip for me."}]
    rej = r.rejected.frame()
    assert rej["record"].to_list() == [4, 5, 6] and rej["field"].to_list() == ["task", "vague", "missing_details"]
    assert inquiries(None) == [] and inquiries([{"inquiry": "A?", "importance": "1"}, {"inquiry": "B?"}]) == ["A?", "B?"]


def test_in3_is_an_external_format():
    r = import_dataset("in3", "in3", DATA / "in3_sample.jsonl", limit=2)
    assert r.turns.height == 2 and set(r.turns["dataset"]) == {"in3"}


def test_clamber_bad_lines_are_quarantined_with_reasons():
    rej = read_clamber(DATA / "clamber_sample.jsonl", "clamber").rejected.frame()
    assert rej.columns == ["file", "record", "field", "reason", "raw"]
    assert rej["record"].to_list() == [4, 5, 6, 7]
    assert rej["field"].to_list() == ["require_clarification", "question", "<record>", "<record>"]
    assert "'maybe'" in rej["reason"][0] and "not valid JSON" in rej["reason"][2] and "list" in rej["reason"][3]
    assert set(rej["file"]) == {str(DATA / "clamber_sample.jsonl")}
    r = read_clamber(DATA / "clamber_sample.jsonl", "c", limit=3)
    assert r.records == 3 and r.turns.height == 3 and len(r.rejected) == 0


def test_clariq_one_dialogue_per_topic_with_threshold():
    r = read_clariq(DATA / "clariq_sample.tsv", "clariq", clarify_from=2)
    t = r.turns.sort("dialogue_id")
    assert t["dialogue_id"].to_list() == ["clariq-101", "clariq-102", "clariq-103", "clariq-106"]
    assert t["reference_action"].to_list() == ["clarify", "answer", "clarify", "clarify"]
    assert t.row(0, named=True)["reference_question"] == "Are you interested in the animal or the car brand?"
    assert r.rejected.frame()["field"].to_list() == ["clarification_need", "initial_request"]
    assert r.records == 7
    strict = read_clariq(DATA / "clariq_sample.tsv", "clariq", clarify_from=4).turns.sort("dialogue_id")
    assert strict["reference_action"].to_list() == ["clarify", "answer", "answer", "answer"]


def test_generic_jsonl_builds_histories_from_reference_questions():
    r = read_generic(DATA / "generic_sample.jsonl", "mine", persona_aliases=PERSONA_ALIASES)
    t = r.turns
    paint3 = t.filter((pl.col("dialogue_id") == "paint-1") & (pl.col("turn") == 3)).row(0, named=True)
    assert [m["role"] for m in paint3["messages"]] == ["user", "assistant", "user", "assistant", "user"]
    assert paint3["messages"][3]["content"] == "Is it for an inside wall or for furniture?"
    assert paint3["n_turns"] == 3 and paint3["persona"] == "partial_vague"
    assert t.filter(pl.col("dialogue_id") == "trip-1")["persona"].to_list() == ["precise", "precise"]  # "Precise"
    rej = r.rejected.frame()
    reasons = dict(zip(rej["record"], rej["reason"]))
    assert "clarify or answer" in reasons[6]
    assert "turn 1 is missing or was rejected" in reasons[7]  # bad-1 turn 2 cannot be rebuilt
    assert "no assistant message before turn 2" in reasons[9]  # gap-1: no reference question, no assistant
    assert r.records == 9 and t.height + len(r.rejected) == r.records


def test_generic_csv():
    r = read_generic(DATA / "generic_sample.csv", "csv", persona_aliases=PERSONA_ALIASES)
    assert r.turns["dialogue_id"].to_list() == ["cake-1", "cake-1", "cake-2"]
    assert r.rejected.frame()["reason"].to_list() == ["turn must be an integer >= 1, got 'two'"]
    assert r.turns.row(2, named=True)["persona"] is None


def test_duplicate_turns_and_file_level_errors(tmp_path):
    f = tmp_path / "dup.jsonl"
    f.write_text('{"dialogue_id": 1, "turn": 1, "user": "a", "reference_action": "answer"}\n'
                 '{"dialogue_id": 1, "turn": "1", "user": "b", "reference_action": "Answer"}\n')
    r = read_generic(f, "x")
    assert r.turns["dialogue_id"].to_list() == ["1"] and "turn 1 twice" in r.rejected.frame()["reason"][0]
    with pytest.raises(InputFileError, match=r"nothing.tsv: file not found \(params: evaluation.external.x.path\)"):
        import_dataset("x", "clariq", tmp_path / "nothing.tsv")
    bad = tmp_path / "bad.csv"
    bad.write_text("dialogue_id,turn,text\n1,1,hi\n")
    with pytest.raises(InputFileError, match=r"bad.csv: missing required column\(s\) \['user', 'reference_action'\]"):
        import_dataset("x", "generic", bad)
    with pytest.raises(InputFileError, match="unknown external format"):
        import_dataset("x", "squad", bad)


def test_long_string_encoded_clamber_line_is_read_whole(tmp_path):
    """A record's raw text is a 500-char snippet: a longer string-encoded line must still be decoded in full."""
    question = "Which of these " + "very " * 150 + "long options?"
    f = tmp_path / "long.jsonl"
    f.write_text(json.dumps(json.dumps({"question": question, "require_clarification": 1,
                                        "clarifying_question": "Which one?"})) + "\n")
    r = read_clamber(f, "c")
    assert len(r.rejected) == 0 and r.turns["user_utterance"].to_list() == [question]
