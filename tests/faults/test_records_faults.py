"""Issue 16 items 3-4 at the records layer: a broken JSON array item costs only itself, the JSON layout is read
from the content, an independent count reconciles with the reader, and bad text (invalid UTF-8, lone
surrogates, oversized values, absurd numbers or nesting) becomes a quarantined record instead of being
accepted, replaced or crashing the reader."""

import gzip
import json

import polars as pl
import pytest

from dagster_project.io.records import InputFileError, Quarantine, count_records, iter_records, json_layout

OBJS = [{"id": i, "text": f"record {i}"} for i in range(1, 7)]


def _summary(path):
    recs = list(iter_records(path))
    return [(r.record, r.problem) for r in recs], recs


def _items(objs):
    return [json.dumps(o) for o in objs]


@pytest.mark.parametrize("broken, at", [
    ('{"id": 3, "text": }', 3),  # missing value
    ('{"id": 3, "text": "unterminated}', 3),  # string never closed
    ('{"id": 3 "text": "no comma"}', 3),  # missing comma inside the item
    ('{"id": 3, "text": "x"}}', 3),  # stray closer at array level
])
def test_a_broken_array_item_costs_only_itself(tmp_path, broken, at):
    items = _items(OBJS)
    items[at - 1] = broken
    p = tmp_path / "logs.json"
    p.write_text("[" + ", ".join(items) + "]")
    seen, recs = _summary(p)
    assert seen == [(n, "invalid_json" if n == at else None) for n in range(1, 7)]
    assert [r.data["id"] for r in recs if r.problem is None] == [n for n in range(1, 7) if n != at]
    assert count_records(p) == 6


def test_pretty_printed_array_with_an_unclosed_item_resumes_at_the_next_item(tmp_path):
    p = tmp_path / "logs.json"
    p.write_text('[\n  {"id": 1, "meta": {"a": 1},\n  {"id": 2},\n  {"id": 3, "turns": [1, 2},\n  {"id": 4}\n]\n')
    seen, recs = _summary(p)
    assert seen == [(1, "invalid_json"), (2, None), (3, "invalid_json"), (4, None)]
    assert count_records(p) == 4


def test_truncated_array_and_trailing_text_are_records_not_losses(tmp_path):
    p = tmp_path / "cut.json"
    p.write_text('[{"id": 1}, {"id": 2}, {"id": 3, "te')
    assert _summary(p)[0] == [(1, None), (2, None), (3, "invalid_json")]
    p.write_text('[{"id": 1}] {"id": 2} trailing')
    assert _summary(p)[0] == [(1, None), (2, "invalid_json")]
    assert count_records(p) == 2


def test_a_jsonl_file_whose_first_line_is_an_array_is_read_as_lines(tmp_path):
    p = tmp_path / "mixed.jsonl"
    p.write_text('[{"id": 1}, {"id": 2}]\n{"id": 3}\n{"id": 4}\n')
    assert json_layout(p) == "lines"
    assert _summary(p)[0] == [(1, "not_an_object"), (2, None), (3, None)]
    assert count_records(p) == 3


@pytest.mark.parametrize("name, text, layout", [
    ("a.json", '[\n {"id": 1},\n {"id": 2}\n]\n', "array"),
    ("a.json", '[{"id": 1}, {"id": 2}]', "array"),  # one line holding an array
    ("a.jsonl", '[{"id": 1}, {"id": 2}]', "array"),
    ("a.json", '{"id": 1}\n{"id": 2}\n', "lines"),  # JSON Lines named .json
    ("a.json", '{"intents": [\n {"name": "x"}\n]}\n', "document"),
    ("a.json", '{"id": 1, "text": }\n{"id": 2}\n', "lines"),
    ("a.jsonl", '{"id": 1, \n{"id": 2}\n', "lines"),  # broken first line, still lines
    ("a.jsonl", '[1, \n{"id": 2}\n', "lines"),
    ("a.json", '[{"id": 1},\n{"id": 2}\n]', "array"),
])
def test_json_layout_comes_from_the_content(tmp_path, name, text, layout):
    p = tmp_path / name
    p.write_text(text)
    assert json_layout(p) == layout


@pytest.mark.parametrize("name", ["r.csv", "r.tsv", "r.json", "r.jsonl", "r.jsonl.gz", "r.yaml", "r.parquet"])
def test_count_records_agrees_with_the_reader(tmp_path, name):
    p = tmp_path / name
    rows = OBJS + [{"id": 7, "text": "a, \"quoted\"\nmultiline cell"}]
    if name.endswith(".parquet"):
        pl.DataFrame(rows).write_parquet(p)
    elif name.endswith((".csv", ".tsv")):
        pl.DataFrame(rows).write_csv(p, separator="," if name.endswith(".csv") else "\t")
    elif name.endswith(".jsonl.gz"):
        p.write_bytes(gzip.compress("\n".join(_items(rows)).encode()))
    elif name.endswith(".jsonl"):
        p.write_text("\n".join(_items(rows)) + "\n\n")
    elif name.endswith(".yaml"):
        p.write_text("\n".join(f"- {json.dumps(r)}" for r in rows))
    else:
        p.write_text(json.dumps(rows, indent=2))
    assert count_records(p) == len(list(iter_records(p))) == 7


BAD = b"Caf\xc3"  # a cut-off two-byte sequence: not UTF-8


@pytest.mark.parametrize("name, content", [
    ("t.csv", b"id,text\n1,fine\n2," + BAD + b"\n3,also fine\n"),
    ("t.tsv", b"id\ttext\n1\tfine\n2\t" + BAD + b"\n3\talso fine\n"),
    ("t.jsonl", b'{"id": 1, "text": "fine"}\n{"id": 2, "text": "' + BAD + b'"}\n{"id": 3, "text": "also fine"}\n'),
    ("t.json", b'[{"id": 1, "text": "fine"}, {"id": 2, "text": "' + BAD + b'"}, {"id": 3, "text": "also fine"}]'),
    ("t2.json", b'{"rows": [{"id": 1, "text": "fine"}, {"id": 2, "text": "' + BAD + b'"},\n'
                b' {"id": 3, "text": "also fine"}]}'),
])
def test_invalid_utf8_is_quarantined_not_replaced(tmp_path, name, content):
    p = tmp_path / name
    p.write_bytes(content)
    seen, recs = _summary(p)
    assert seen == [(1, None), (2, "not_utf8"), (3, None)]
    assert all("\ufffd" not in str(r.data) for r in recs if r.problem is None)
    assert recs[1].data is None


def test_a_lone_surrogate_escape_is_not_valid_text(tmp_path):
    p = tmp_path / "s.jsonl"
    p.write_text('{"id": 1, "text": "\\ud800 half a pair"}\n{"id": 2, "text": "ok"}\n')
    seen, recs = _summary(p)
    assert seen == [(1, "not_utf8"), (2, None)] and recs[0].field == "text"


def test_an_oversized_text_value_is_quarantined_with_its_field(tmp_path):
    p = tmp_path / "q.jsonl"
    p.write_text(json.dumps({"id": 1, "question": "x" * 5_000_000}) + "\n" + json.dumps({"id": 2, "question": "ok"}))
    recs = list(iter_records(p))
    assert [(r.problem, r.field) for r in recs] == [("oversized_field", "question"), (None, None)]
    assert "5000000 characters" in recs[0].detail and len(recs[0].raw) <= 500
    nested = tmp_path / "n.jsonl"
    nested.write_text(json.dumps({"conversations": [{"value": "ok"}, {"value": "y" * 50}]}))
    assert [(r.problem, r.field) for r in iter_records(nested, max_field_chars=20)] == \
        [("oversized_field", "conversations[1].value")]


def test_absurd_numbers_and_nesting_are_invalid_records_not_crashes(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_text('{"n": ' + "9" * 5000 + '}\n' + "[" * 100_000 + "\n" + '{"id": 3}\n')
    assert _summary(p)[0] == [(1, "invalid_json"), (2, "invalid_json"), (3, None)]
    q = tmp_path / "a.json"
    q.write_text("[" + "[" * 100_000 + "]" * 100_000 + ', {"id": 2}]')
    assert _summary(q)[0] == [(1, "invalid_json"), (2, None)]


def test_undecodable_bytes_in_a_header_or_key_never_reach_a_stored_row(tmp_path):
    p = tmp_path / "h.csv"
    p.write_bytes(b"\xffid,text\n1,x\n")
    with pytest.raises(InputFileError, match="h.csv: the header row is not valid UTF-8"):
        list(iter_records(p))
    j = tmp_path / "k.json"
    j.write_bytes(b'[{"\xffid": 1}, {"id": 2}]')
    recs = list(iter_records(j))
    assert [(r.problem, r.field) for r in recs] == [("not_utf8", "\udcffid"), (None, None)]
    q = Quarantine()
    q.add_record(recs[0], "not_utf8: bad key")
    assert q.frame()["field"].to_list() == ["\ufffdid"]  # storable text, not a surrogate
