"""Issue 29 items 2-4: one bad record in a CSV / TSV file or a JSON document costs that record only. A 5 MB field
is quarantined (naming file, record and field) instead of refusing the file; a stray or unterminated quote loses
one row at most; a `{"data": [...]}` document with a broken item keeps every good item."""

import csv
import io
import json

import pytest

from dagster_project.config import LogsConfig
from dagster_project.core.clarilm.logs import load_logs
from dagster_project.io.delimited import long_cell, unquote
from dagster_project.io.formats.clariq import read_clariq
from dagster_project.io.formats.dialogues import read_generic as read_dialogues
from dagster_project.io.formats.qa_generic import read_generic as read_qa
from dagster_project.io.records import count_records, iter_records

BIG = "x" * (5 << 20)


def _clariq(tmp_path, bad_row: str):
    rows = [f"t{i}\trequest {i}\t{2 + i % 2}\tquestion {i}?" for i in range(1, 6)]
    rows.insert(2, bad_row)
    path = tmp_path / "clariq.tsv"
    path.write_text("topic_id\tinitial_request\tclarification_need\tquestion\n" + "\n".join(rows) + "\n")
    return path


def test_a_5mb_field_in_clariq_tsv_is_one_quarantined_record(tmp_path):
    path = _clariq(tmp_path, f"tbig\t{BIG}\t2\tq?")
    res = read_clariq(path, "clariq", max_field_chars=20_000)
    assert res.turns["dialogue_id"].to_list() == [f"clariq-t{i}" for i in range(1, 6)]
    [bad] = res.rejected.rows
    assert (bad["file"], bad["record"], bad["field"]) == (path.as_posix(), 3, "initial_request")
    assert bad["reason"].startswith("oversized_field")
    assert count_records(path) == 6


def test_a_5mb_field_in_generic_dialogue_csv_and_qa_csv_is_one_quarantined_record(tmp_path):
    dialogues = tmp_path / "dialogues.csv"
    with dialogues.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["dialogue_id", "turn", "user", "reference_action"])
        for i in range(1, 7):
            w.writerow([f"d{i}", 1, BIG if i == 4 else f"hello {i}", "answer"])
    res = read_dialogues(dialogues, "generic", max_field_chars=20_000)
    assert res.turns.height == 5 and [(r["record"], r["field"]) for r in res.rejected.rows] == [(4, "user")]

    qa = tmp_path / "qa.csv"
    with qa.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "question", "answers"])
        for i in range(1, 7):
            w.writerow([f"q{i}", BIG if i == 2 else f"who is {i}?", json.dumps([[f"a{i}"]])])
    records, q = read_qa(qa, max_field_chars=20_000)
    assert [r.id for r in records] == ["q1", "q3", "q4", "q5", "q6"]
    assert [(r["record"], r["field"]) for r in q.rows] == [(2, "question")]


def test_a_field_over_the_csv_limit_names_its_field(tmp_path):
    """A cell longer than the csv module's limit (raised to max(max_field_chars, MAX_FIELD_CHARS)) is found by the
    row splitter itself, not by the record check, and still names the field."""
    path = tmp_path / "t.csv"
    path.write_text(f"id,text,extra\n1,fine,a\n2,\"{'y' * 1_200_000}\",b\n3,also fine,c\n")
    recs = list(iter_records(path))
    assert [r.data["id"] for r in recs if not r.problem] == ["1", "3"]
    [bad] = [r for r in recs if r.problem]
    assert (bad.record, bad.problem, bad.field) == (2, "oversized_field", "text")


@pytest.mark.parametrize("suffix, sep", [(".tsv", "\t"), (".csv", ",")])
@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_a_stray_quote_costs_one_row_at_most(tmp_path, suffix, sep, where):
    good = [sep.join([f"r{i}", f"text {i}"]) for i in range(1, 6)]
    stray = sep.join(["bad", '"unterminated text'])
    at = {"start": 0, "middle": 2, "end": 5}[where]
    path = tmp_path / f"t{suffix}"
    path.write_text(sep.join(["id", "text"]) + "\n" + "\n".join(good[:at] + [stray] + good[at:]) + "\n")
    recs = list(iter_records(path))
    kept = [r.data["id"] for r in recs if not r.problem]
    assert [k for k in kept if k != "bad"] == [f"r{i}" for i in range(1, 6)]
    assert count_records(path) == 6 == len(recs)
    if suffix == ".tsv":  # no quote processing: the quote is a character of the text
        assert next(r.data["text"] for r in recs if r.data and r.data["id"] == "bad") == '"unterminated text'
    else:
        [bad] = [r for r in recs if r.problem]
        assert (bad.record, bad.problem) == (at + 1, "unbalanced_quote")


@pytest.mark.parametrize("suffix, sep", [(".csv", ","), (".tsv", "\t")])
def test_quoted_cells_written_by_a_csv_writer_read_back(tmp_path, suffix, sep):
    """Multi-line cells and doubled quotes as Python's csv (and pandas / polars) write them, CSV and TSV."""
    path = tmp_path / f"t{suffix}"
    rows = [["1", "line one\nline two"], ["2", 'say "hi", then go'], ["3", "ends with a newline\n"],
            ["4", "para\n\nafter a blank line"], ["5", "plain"]]
    buf = io.StringIO()
    csv.writer(buf, delimiter=sep, lineterminator="\n").writerows([["id", "text"], *rows])
    path.write_text(buf.getvalue())
    assert [[r.data["id"], r.data["text"]] for r in iter_records(path)] == rows
    assert count_records(path) == 5


def test_two_stray_quotes_and_a_ragged_row_cost_themselves(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('id,text\nr1,"oops\nr2,x\nr3,"oops\nr4,"a, b"\nr5,y,extra\nr6,"multi\nline"\n')
    recs = list(iter_records(path))
    assert [(r.data["id"], r.data["text"]) for r in recs if not r.problem] == \
        [("r2", "x"), ("r4", "a, b"), ("r6", "multi\nline")]
    assert [(r.record, r.problem) for r in recs if r.problem] == \
        [(1, "unbalanced_quote"), (3, "unbalanced_quote"), (5, "ragged_row")]


def test_tsv_cells_quoted_by_a_csv_writer_are_unwrapped():
    assert unquote('"say ""hi"""') == 'say "hi"'
    assert unquote('"hello" world') == '"hello" world'  # not wrapped as a whole: kept as written
    assert unquote('"a"b"') == '"a"b"'  # a lone inner quote: not a writer's quoting
    assert long_cell('a,"bb,b""b",ccc', ",", 5) == 1 and long_cell("a,b", ",", 5) is None


def _document(items_text: list[str]) -> str:
    return '{"data": [\n' + ",\n".join(items_text) + "\n]}\n"


def test_a_keyed_json_document_streams_its_items(tmp_path):
    good = [json.dumps({"id": f"c{i}", "conversations": [{"from": "human", "value": f"hi {i}"},
                                                         {"from": "gpt", "value": "hello"}]}) for i in range(1, 6)]
    path = tmp_path / "logs.json"
    path.write_text(_document(good[:2] + ['{"id": "broken", "conversations": [oops]}'] + good[2:]))
    cfg = LogsConfig(paths=[str(path)], default_log_date="2024-05-01")
    turns, rejected, stats = load_logs([path], cfg)
    assert sorted(set(turns["conversation_id"])) == [f"c{i}" for i in range(1, 6)]
    assert rejected["record"].to_list() == [3] and rejected["reason"][0].startswith("invalid_json")
    assert stats.file_records[path.as_posix()] == stats.file_counted[path.as_posix()] == 6


@pytest.mark.parametrize("text, kept, broken", [
    ('{"items": [{"a": 1}, {"a": 2}]}', [1, 2], []),
    ('{"items": [{"a": 1}, {"a": 2}', [1, 2], []),  # cut off before its end: still streamed
    ('{"items": [{"a": 1}, {"a": 2}], "more": [3]}', [1, 2], [3]),  # a second key: one broken record
    ('{"a": 1, "items": [1]}', [], []),  # one record (its first value is not a list)
])
def test_keyed_document_layouts(tmp_path, text, kept, broken):
    path = tmp_path / "d.json"
    path.write_text(text)
    recs = list(iter_records(path))
    assert [r.data["a"] for r in recs if not r.problem and "a" in r.data and len(r.data) == 1] == kept
    assert [r.record for r in recs if r.problem] == broken
    assert count_records(path) == len(recs)
