"""The records layer: every supported file type gives records with file + 1-based record number; what cannot be
parsed is a record with a problem (quarantined, never fatal); a file that cannot be read at all is one
InputFileError naming file, record, field and params key; writers are atomic."""

import gzip
import json
import os

import polars as pl
import pytest

from dagster_project.io.records import QUARANTINE_SCHEMA, InputFileError, Quarantine, iter_records, read_records
from dagster_project.io.writers import write_jsonl_atomic, write_parquet_atomic

ROWS = [{"id": "a", "text": "first"}, {"id": "b", "text": "second"}]


def _write(path, kind):
    if kind == "jsonl":
        path.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n")
    elif kind == "json":
        path.write_text(json.dumps(ROWS))
    elif kind == "json_key":
        path.write_text(json.dumps({"items": ROWS}))
    elif kind == "yaml":
        path.write_text("- {id: a, text: first}\n- {id: b, text: second}\n")
    elif kind == "csv":
        path.write_text("id,text\na,first\nb,second\n")
    elif kind == "tsv":
        path.write_text("id\ttext\na\tfirst\nb\tsecond\n")
    elif kind == "parquet":
        pl.DataFrame(ROWS).write_parquet(path)
    elif kind == "jsonl.gz":
        path.write_bytes(gzip.compress(("\n".join(json.dumps(r) for r in ROWS) + "\n").encode()))
    return path


@pytest.mark.parametrize("kind, suffix, first", [
    ("jsonl", ".jsonl", 1), ("json", ".json", 1), ("json_key", ".json", 1), ("yaml", ".yaml", 1),
    ("csv", ".csv", 1), ("tsv", ".tsv", 1), ("parquet", ".parquet", 1), ("jsonl.gz", ".jsonl.gz", 1),
    ("jsonl", ".json", 1),  # a .json file holding one object per line
])
def test_every_format_gives_the_same_records(tmp_path, kind, suffix, first):
    path = _write(tmp_path / f"in{suffix}", kind)
    recs = list(iter_records(path))
    assert [r.data for r in recs] == ROWS
    assert [r.record for r in recs] == [first, first + 1]
    assert all(r.file == path.as_posix() and r.problem is None for r in recs)


def test_broken_lines_are_records_with_a_problem_not_errors(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"id": "a"}\n\n{"id": oops}\n[1, 2]\n\xff\xfe{"id": "c"}\n{"id": "d"}\n')
    good, q = read_records(path)
    assert [(r.record, r.data["id"]) for r in good] == [(1, "a"), (6, "d")]  # line numbers, blank line counted
    frame = q.frame()
    assert frame.columns == list(QUARANTINE_SCHEMA) and frame["record"].to_list() == [3, 4, 5]
    assert [r.split(":")[0] for r in frame["reason"]] == ["invalid_json", "not_an_object", "not_utf8"]
    assert frame["raw"][0] == '{"id": oops}'


def test_quarantine_names_file_record_field(tmp_path):
    q = Quarantine()
    q.add("a.csv", 7, "missing", field="question", raw={"id": 1})
    assert q.frame().to_dicts() == [{"file": "a.csv", "record": 7, "field": "question", "reason": "missing",
                                     "raw": '{"id": 1}'}]
    assert q.reasons() == {"missing": 1} and len(q) == 1


def test_unreadable_files_are_one_clear_error(tmp_path):
    with pytest.raises(InputFileError, match="nope.jsonl: file not found"):
        list(iter_records(tmp_path / "nope.jsonl"))
    bad = tmp_path / "x.docx"
    bad.write_text("x")
    with pytest.raises(InputFileError, match=r"x.docx: unsupported file type '.docx'"):
        list(iter_records(bad))
    doc = tmp_path / "broken.yaml"
    doc.write_text("a: [1, 2\n")
    with pytest.raises(InputFileError, match="broken.yaml: not valid YAML"):
        list(iter_records(doc))
    with pytest.raises(InputFileError, match=r"broken.yaml: not valid YAML.*\(params: intents.catalog_path\)"):
        list(iter_records(doc, key="intents.catalog_path"))
    err = InputFileError("in.csv", "must be a number", record=4, field="turn", key="double_turn.inputs")
    assert str(err) == "in.csv, record 4, field 'turn': must be a number (params: double_turn.inputs)"


def test_writers_are_atomic_and_leave_the_old_file_on_failure(tmp_path):
    target = tmp_path / "out" / "t.parquet"
    write_parquet_atomic(pl.DataFrame(ROWS), target)
    assert pl.read_parquet(target).to_dicts() == ROWS
    assert oct(os.stat(target).st_mode & 0o777) != oct(0o600)  # a plain write's permissions, not mkstemp's

    class Boom(pl.DataFrame):
        def write_parquet(self, *a, **k):
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_parquet_atomic(Boom(ROWS[:1]), target)
    assert pl.read_parquet(target).to_dicts() == ROWS  # the last good file is still there
    assert sorted(p.name for p in target.parent.iterdir()) == ["t.parquet"]  # no temp file left

    jl = tmp_path / "x.jsonl"
    assert write_jsonl_atomic(pl.DataFrame(ROWS), jl) == 2
    assert [json.loads(x) for x in jl.read_text().splitlines()] == ROWS
    assert write_jsonl_atomic(iter([{"q": "é"}]), jl) == 1 and jl.read_text() == '{"q": "é"}\n'


def test_ragged_csv_rows_are_problems_not_truncated(tmp_path):
    path = tmp_path / "in.tsv"
    path.write_text("id\ttext\tn\na\tfirst\t1\nb\tshort\nc\tlong\t3\textra\nd\tlast\t4\n")
    good, q = read_records(path)
    assert [r.data["id"] for r in good] == ["a", "d"] and [r.record for r in good] == [1, 4]
    assert q.frame()["reason"].to_list() == ["ragged_row: expected 3 fields, got 2", "ragged_row: expected 3 fields, got 4"]
    assert q.frame()["record"].to_list() == [2, 3]
