"""The double-turn paper's released *.clarify.jsonl format (issue 26): our own sample in that format imports with
nothing quarantined, through the importer and through the double_turn group's QA reader; a malformed record is
quarantined with its field and reason, and the records after it are read."""

import json
from pathlib import Path

from dagster_project.config import DoubleTurnInput
from dagster_project.core.double_turn.qa import read_inputs, read_qa_file
from dagster_project.io.formats.clarify_jsonl import read_clarify_jsonl

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "double_turn" / "sample.clarify.jsonl"


def test_the_sample_imports_with_every_record_kept():
    records, q = read_clarify_jsonl(SAMPLE)
    assert len(q) == 0
    assert [r.id for r in records] == ["s-001", "s-002", "s-003", "s-004", "s-005"]
    first = records[0]
    assert first.record == 1 and first.question == "Who painted the ceiling of the chapel?"
    assert first.items == [(["Michelangelo"], "Who painted the ceiling of the Sistine Chapel?"),
                           (["Pietro Annigoni"], "Who painted the ceiling of the chapel at the Basilica of Saint "
                                                 "Anthony in Padua?")]
    assert records[4].items == [(["Mary Shelley"], None)]  # NQ-Open style: no disambiguations


def test_nq_answers_can_be_the_answer_set():
    records, q = read_clarify_jsonl(SAMPLE, answers_key="nq_answers")
    assert len(q) == 0 and records[4].items == [(["Mary Shelley"], None), (["Mary Wollstonecraft Shelley"], None)]


def test_the_double_turn_reader_takes_the_format():
    f = read_qa_file(SAMPLE, "clarify_jsonl")
    assert (f.format, len(f.records), len(f.quarantine), f.n_read) == ("clarify_jsonl", 5, 0, 5)
    [read] = read_inputs([DoubleTurnInput(path=str(SAMPLE), format="clarify_jsonl", split="eval")])
    assert len(read.records) == 5


def test_malformed_records_are_quarantined_with_field_and_reason(tmp_path):
    good = json.loads(SAMPLE.read_text().splitlines()[0])
    lines = [
        json.dumps(good),
        json.dumps(good | {"id": "b1", "answers": []}),
        json.dumps(good | {"id": "b2", "answers": "Michelangelo"}),
        json.dumps({k: v for k, v in good.items() if k != "question"} | {"id": "b3"}),
        json.dumps(good | {"id": "b4", "disambiguations": [{"question": "q?", "answer": [7]}]}),
        json.dumps(good | {"id": "b5", "isambig": "yes"}),
        '{"id": "b6", "question": oops}',
        json.dumps(good | {"id": "last"}),
    ]
    path = tmp_path / "broken.clarify.jsonl"
    path.write_text("\n".join(lines) + "\n")
    records, q = read_clarify_jsonl(path)
    assert [r.id for r in records] == [good["id"], "last"]
    assert [(r["file"], r["record"], r["field"]) for r in q.rows] == [
        (path.as_posix(), 2, "answers"), (path.as_posix(), 3, "answers"), (path.as_posix(), 4, "question"),
        (path.as_posix(), 5, "disambiguations[0].answer[0]"), (path.as_posix(), 6, "isambig"),
        (path.as_posix(), 7, "<record>")]
    assert all(r["reason"] for r in q.rows) and q.rows[-1]["reason"].startswith("invalid_json")
