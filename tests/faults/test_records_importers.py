"""Issue 16 items 3-4 through the importers: the logs ledger notices a reader that loses records, a JSON / JSONL
file without a required column fails naming file and column (as CSV / TSV does), a duplicate id in an external
dataset and an oversized question are quarantined before anything is written."""

import json
from dataclasses import replace
from datetime import date
from pathlib import Path

import pytest

import dagster_project.core.clarilm.logs as logs_core
from dagster_project.config import ExternalDatasetConfig, LogsConfig, load_params
from dagster_project.core.clarifymt.external import import_dataset
from dagster_project.core.double_turn.qa import read_qa_file
from dagster_project.defs.quality.checks import load_suite, validate_frame
from dagster_project.io.formats.intents import read_ambiguous, read_catalog, read_few_shot
from dagster_project.io.formats.retrieval import import_documents
from dagster_project.io.records import InputFileError

REPO = Path(__file__).resolve().parents[2]


def _conv(i):
    return {"id": f"c{i}", "timestamp": "2024-05-01T10:00:00Z",
            "conversations": [{"from": "human", "value": f"question {i}"}, {"from": "gpt", "value": "answer"}]}


def _broken_array(tmp_path):
    items = [json.dumps(_conv(i)) for i in range(1, 7)]
    items[2] = '{"id": "c3", "conversations": [{"from": "human", "value": }]}'
    p = tmp_path / "logs.json"
    p.write_text("[\n" + ",\n".join(items) + "\n]\n")
    return p


def _ledger_check(tmp_path):
    cfg = LogsConfig(paths=[str(tmp_path / "logs.json")], default_log_date="2024-05-01")
    day = date(2024, 5, 1)
    turns, rejected, stats = logs_core.load_logs([tmp_path / "logs.json"], cfg, day)
    ledger = logs_core.ledger(stats, day, turns, rejected)
    suite = load_suite(REPO / "expectations/logs.raw_logs_ledger.yaml")
    own = replace(suite, expectations=[e for e in suite.expectations if e.query is None])
    return ledger, validate_frame(ledger, own, load_params(REPO / "params.yaml"))[0]


def test_logs_ledger_counts_every_item_of_a_broken_array(tmp_path):
    _broken_array(tmp_path)
    ledger, ok = _ledger_check(tmp_path)
    row = ledger.row(0, named=True)
    assert (row["records_read"], row["conversations_kept"], row["records_rejected"]) == (6, 5, 1)
    assert row["file_records_read"] == row["file_records_counted"] == 6 and ok


def test_logs_ledger_check_fails_when_the_reader_loses_records(tmp_path, monkeypatch):
    _broken_array(tmp_path)
    real = logs_core.iter_records

    def lossy(path, *args, **kwargs):  # the old failure: everything after the first bad item is one record
        for rec in real(path, *args, **kwargs):
            yield rec
            if rec.problem:
                return

    monkeypatch.setattr(logs_core, "iter_records", lossy)
    ledger, ok = _ledger_check(tmp_path)
    row = ledger.row(0, named=True)
    assert row["records_read"] == row["conversations_kept"] + row["records_rejected"] == 3  # reconciles...
    assert (row["file_records_read"], row["file_records_counted"]) == (3, 6) and not ok  # ...but the count sees it


@pytest.mark.parametrize("name, read, text, column", [
    ("generic.jsonl", lambda p: import_dataset("x", "generic", p),
     '{"dialogue_id": "d1", "turn": 1, "user": "hi"}\n', "reference_action"),
    ("clamber.jsonl", lambda p: import_dataset("x", "clamber", p),
     '{"question": "what?", "clarifying_question": "which?"}\n', "require_clarification"),
    ("nq.jsonl", lambda p: read_qa_file(p, "nq_open"), '{"question": "who?", "answers": ["a"]}\n', "answer"),
    ("qa.jsonl", lambda p: read_qa_file(p, "generic"), '{"id": 1, "question": "who?"}\n', "answers"),
    ("ambig.json", lambda p: read_qa_file(p, "ambigqa"), '[{"id": 1, "question": "who?"}]', "annotations"),
    ("amb.jsonl", read_ambiguous, '{"ambiguous_query": "a", "unambiguous_query": "b", "true_intent": "x"}\n',
     "candidate_intents"),
    ("shots.jsonl", read_few_shot, '{"dialogue": []}\n', "messages"),
    ("catalog.json", read_catalog, '[{"label": "x"}]', "name"),
    ("docs.jsonl", import_documents, '{"id": "d1", "text": "t"}\n', "doc_id"),
])
def test_a_json_file_without_a_required_column_fails_naming_file_and_column(tmp_path, name, read, text, column):
    p = tmp_path / name
    p.write_text(text * 3 if name.endswith(".jsonl") else text)
    with pytest.raises(InputFileError, match=rf"{name}.*{column}"):
        read(p)


def test_a_required_column_that_only_some_records_lack_is_a_record_problem(tmp_path):
    p = tmp_path / "clamber.jsonl"
    p.write_text('{"question": "what?", "require_clarification": 1}\n{"question": "where?"}\n')
    res = import_dataset("x", "clamber", p)
    assert res.turns.height == 1 and res.rejected.frame()["field"].to_list() == ["require_clarification"]


def test_a_duplicate_id_in_an_external_dataset_is_quarantined_before_writing(tmp_path):
    p = tmp_path / "clamber.jsonl"
    rows = [{"id": "q1", "question": "a?", "require_clarification": 0},
            {"id": "q1", "question": "b?", "require_clarification": 1},
            {"id": "q2", "question": "c?", "require_clarification": 1}]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = import_dataset("clamber", "clamber", p)
    assert res.turns["dialogue_id"].to_list() == ["clamber-q1", "clamber-q2"]
    rej = res.rejected.frame()
    assert rej.select("record", "field").rows() == [(2, "id")] and "first at record 1" in rej["reason"][0]
    assert res.records == res.turns.height + len(res.rejected)


def test_an_oversized_question_is_quarantined_under_the_param(tmp_path):
    p = tmp_path / "generic.jsonl"
    rows = [{"dialogue_id": "d1", "turn": 1, "user": "x" * 5_000_000, "reference_action": "answer"},
            {"dialogue_id": "d2", "turn": 1, "user": "short", "reference_action": "clarify"}]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    limit = ExternalDatasetConfig(format="generic", path=str(p)).max_field_chars  # evaluation.external.<name>
    res = import_dataset("g", "generic", p, max_field_chars=limit)
    assert res.turns["dialogue_id"].to_list() == ["d2"]
    rej = res.rejected.frame().row(0, named=True)
    assert rej["field"] == "user" and rej["reason"].startswith("oversized_field") and len(rej["raw"]) <= 500
