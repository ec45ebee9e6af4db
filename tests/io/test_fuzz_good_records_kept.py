"""Every importer fuzzed with generated files that mix good and broken records (issue 29 item 2): every good
record is kept, every broken one is quarantined with its file, record number, field and a reason, whatever
the mix and order, in every layout the importer reads (JSONL, JSON array, `{"data": [...]}` document, CSV, TSV,
TREC lines).

Broken records, one fault each: a value of the wrong kind (the importer's own rule, quarantined with that field),
a text field longer than the importer's limit, bytes that are not UTF-8, and a syntax fault: an unparseable JSON
value, in CSV a quote opening a cell that never closes (TSV has no quoting: such a row is kept, quote and all,
and counts as good), a row with one cell too many. Good CSV / TSV rows are single-line (multi-line CSV cells are
covered in test_bad_records_cost_themselves.py). Examples per importer: CLARIFY_FUZZ_EXAMPLES (default 25).
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dagster_project.config import IntentsConfig, LogsConfig
from dagster_project.core.clarifymt.external import import_dataset
from dagster_project.core.clarilm.logs import load_logs
from dagster_project.core.intents.utterances import validate_utterances
from dagster_project.io.formats.ambigqa import read_ambigqa
from dagster_project.io.formats.clarify_jsonl import read_clarify_jsonl
from dagster_project.io.formats.intents import read_intent_records
from dagster_project.io.formats.nq_open import read_nq_open
from dagster_project.io.formats.qa_generic import read_generic as read_qa_generic
from dagster_project.io.formats.retrieval import import_clarification_qa, import_documents, import_qrels
from dagster_project.io.formats.trec import parse_trec_run, read_lines

FUZZ = settings(max_examples=int(os.environ.get("CLARIFY_FUZZ_EXAMPLES", "25")), deadline=None,
                derandomize=not os.environ.get("CLARIFY_FUZZ_RANDOM"),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
LIMIT = 40  # max_field_chars / max_message_chars given to every importer
INTENTS = ["greeting", "refund", "delivery"]
KINDS = ["good", "good", "good", "wrong_value", "oversized", "not_utf8", "syntax", "extra_cell"]
BAD_BYTES = "ZZNOTUTF8ZZ"  # replaced by an invalid UTF-8 byte in the file
BARE = "ZZBAREWORDZZ"  # its quoted form is replaced by a bare word: invalid JSON
STRAY = "ZZSTRAYQUOTEZZ"  # in CSV / TSV: replaced by a quote opening a cell that never closes


def words(line_safe: bool) -> st.SearchStrategy[str]:
    """Short text: a letter first (never blank), no control characters (the intents importer refuses them); CSV /
    TSV text has no line or paragraph separator either."""
    chars = st.characters(blacklist_categories=("Cs", "Cc") + (("Zl", "Zp") if line_safe else ()))
    return st.builds(lambda a, b: f"w{a}{b}", st.text(chars, max_size=8), st.text(chars, max_size=8))


@dataclass
class Importer:
    """How to build one good record, break it, and read a file back as (kept record numbers, quarantine rows)."""

    name: str
    layouts: list[str]
    good: Callable[[int, str], dict[str, Any]]  # record number, a text -> a good record
    wrong: tuple[str, Any]  # (field, a value the importer refuses there)
    text_field: str  # where the oversized / undecodable / syntax faults go (a top-level string field)
    run: Callable[[Path], tuple[list[int], list[dict]]]
    breaker: Callable[[dict[str, Any], str, str], tuple[dict[str, Any], str | None]] | None = None


def _serialise(records: list[dict], layout: str) -> bytes:
    """Records in one layout; the placeholders become the faults they name."""
    if layout in ("csv", "tsv"):
        columns = [c for c in records[0] if c != "__extra__"]
        rows = [columns] + [[_cell(r.get(c, "")) for c in columns] + r.get("__extra__", []) for r in records]
        if layout == "csv":
            buf = io.StringIO()
            csv.writer(buf, lineterminator="\n").writerows(rows)
            text = buf.getvalue()
        else:  # TSV has no quoting: its cells hold no tab or line break
            text = "".join("\t".join(r) + "\n" for r in rows)
        text = text.replace(STRAY, '"never closed')
    else:
        items = [json.dumps({k: v for k, v in r.items() if k != "__extra__"}, ensure_ascii=False) for r in records]
        text = {"jsonl": "{}\n", "json": "[\n{}\n]\n", "keyed": '{{"data": [\n{}\n]}}\n'}[layout].format(
            ("\n" if layout == "jsonl" else ",\n").join(items))
        text = text.replace(f'"{BARE}"', "oops")
    return text.encode().replace(BAD_BYTES.encode(), b"\xff\xfe")


def _cell(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def _break(imp: Importer, rec: dict[str, Any], kind: str, layout: str) -> tuple[dict[str, Any], str | None]:
    """The record with one fault of `kind`, and the field its quarantine row must name (None: any)."""
    if imp.breaker is not None:
        return imp.breaker(rec, kind, layout)
    text_path = imp.text_field
    if kind == "wrong_value":
        return rec | {imp.wrong[0]: imp.wrong[1]}, imp.wrong[0]
    if kind == "oversized":
        return rec | {imp.text_field: "x" * (LIMIT + 1)}, text_path
    if kind == "not_utf8":
        return rec | {imp.text_field: f"w{BAD_BYTES}"}, text_path if layout in ("csv", "tsv") else None
    if kind == "syntax":
        return rec | {imp.text_field: STRAY if layout in ("csv", "tsv") else BARE}, None
    return rec | {"__extra__": ["one cell too many"]}, None  # extra_cell


def fuzz(imp: Importer):
    """One Hypothesis test: a file of good and broken records in one of the importer's layouts."""
    line_safe = any(layout in ("csv", "tsv") for layout in imp.layouts)

    @FUZZ
    @given(kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=8), layout=st.sampled_from(imp.layouts),
           texts=st.lists(words(line_safe), min_size=8, max_size=8))
    def test(kinds, layout, texts):
        if layout not in ("csv", "tsv"):
            kinds = [k if k != "extra_cell" else "syntax" for k in kinds]  # a JSON record has no cell count
        records, expect_field, good = [], {}, []
        for n, (kind, text) in enumerate(zip(kinds, texts, strict=False), 1):
            rec = imp.good(n, text)
            if kind == "syntax" and layout == "tsv":
                kind = "good"  # no quote processing: a stray quote is a character, the record is good
            if kind != "good":
                rec, expect_field[n] = _break(imp, rec, kind, layout)
            else:
                good.append(n)
            records.append(rec)
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / f"input.{ {'keyed': 'json', 'jsonl': 'jsonl'}.get(layout, layout)}"
            path.write_bytes(_serialise(records, layout))
            kept, rejected = imp.run(path)
        assert sorted(kept) == good, (layout, kinds, kept, rejected)
        assert sorted(r["record"] for r in rejected) == sorted(expect_field), (layout, kinds, rejected)
        for r in rejected:
            assert r["file"] == path.as_posix() and r["reason"] and r["field"], r
            if expect_field[r["record"]] is not None:
                assert r["field"] == expect_field[r["record"]], (kinds, layout, r)
    return test


def _external(fmt: str):
    def run(path: Path):
        res = import_dataset("x", fmt, path, max_field_chars=LIMIT)
        return res.turns["record"].to_list(), res.rejected.rows
    return run


def _qa(reader):
    def run(path: Path):
        records, q = reader(path, max_field_chars=LIMIT)
        return [r.record for r in records], q.rows
    return run


def _logs(path: Path):
    cfg = LogsConfig(paths=[str(path)], default_log_date="2024-05-01", max_message_chars=LIMIT)
    turns, rejected, _ = load_logs([path], cfg)
    return sorted({i + 1 for i in turns["record_index"]}), rejected.to_dicts()


def _utterances(path: Path):
    records = read_intent_records(path, ("text", "intent"), max_field_chars=LIMIT)
    kept, rejected = validate_utterances(records, path.as_posix(), INTENTS, IntentsConfig())
    return [int(u[1:]) for u in kept["utterance_id"]], rejected.rows


def _retrieval(fn):
    def run(path: Path):
        imp = fn(path, max_field_chars=LIMIT)
        return imp.kept["record"].to_list(), imp.rejected.to_dicts()
    return run


def _chat_break(rec: dict, kind: str, layout: str) -> tuple[dict, str | None]:
    """Chat logs nest the text in the turns: the faults go to the first turn's value."""
    first = dict(rec["conversations"][0])
    value, expect = {"oversized": ("x" * (LIMIT + 1), "conversations[0].value"), "not_utf8": (f"w{BAD_BYTES}", None),
                     "syntax": (BARE, None)}.get(kind, (None, "conversations"))
    if value is None:  # wrong_value
        return rec | {"conversations": "not a list"}, expect
    return rec | {"conversations": [first | {"value": value}, rec["conversations"][1]]}, expect


IMPORTERS = [
    Importer("clariq", ["tsv"], lambda n, t: {"topic_id": f"t{n}", "initial_request": t, "clarification_need": "2",
                                             "question": f"which {n}?"},
             ("clarification_need", "9"), "initial_request", _external("clariq")),
    Importer("clamber", ["jsonl", "json", "keyed"],
             lambda n, t: {"id": f"c{n}", "question": t, "require_clarification": n % 2, "clarifying_question": "which?",
                           "category": "MC"}, ("require_clarification", "maybe"), "question", _external("clamber")),
    Importer("in3", ["jsonl", "json"], lambda n, t: {"task": t, "vague": True, "category": "travel",
                                                     "missing_details": [{"inquiry": "when?", "importance": "2"}]},
             ("vague", "maybe"), "task", _external("in3")),
    Importer("dialogues", ["jsonl", "csv", "tsv", "keyed"],
             lambda n, t: {"dialogue_id": f"d{n}", "user": t, "turn": 1, "reference_action": "clarify",
                           "reference_question": "which one?"},
             ("reference_action", "maybe"), "user", _external("generic")),
    Importer("ambigqa", ["json"], lambda n, t: {"id": f"a{n}", "question": t,
                                                "annotations": [{"type": "singleAnswer", "answer": ["x"]}]},
             ("annotations", []), "question", _qa(read_ambigqa)),
    Importer("nq_open", ["jsonl"], lambda n, t: {"id": f"n{n}", "question": t, "answer": ["x", "y"]},
             ("answer", []), "question", _qa(read_nq_open)),
    Importer("qa_generic", ["jsonl", "csv"], lambda n, t: {"id": f"g{n}", "question": t, "answers": [["x"], ["y"]]},
             ("answers", []), "question", _qa(read_qa_generic)),
    Importer("clarify_jsonl", ["jsonl"], lambda n, t: {"id": f"p{n}", "question": t, "answers": ["x", "y"],
                                                       "nq_answers": ["x"]},
             ("answers", "x"), "question", _qa(read_clarify_jsonl)),
    Importer("chat_logs", ["jsonl", "json", "keyed"],
             lambda n, t: {"conversations": [{"from": "human", "value": t}, {"from": "gpt", "value": "ok"}],
                           "id": f"l{n}"},
             ("conversations", "not a list"), "conversations", _logs, breaker=_chat_break),
    Importer("intents", ["jsonl", "json", "csv", "tsv", "keyed"],
             lambda n, t: {"text": f"{t} {n}", "intent": INTENTS[n % 3], "split": "train"},
             ("intent", "bogus"), "text", _utterances),
    Importer("retrieval_documents", ["jsonl", "csv", "tsv"], lambda n, t: {"doc_id": f"D{n}", "text": t, "title": "T"},
             ("text", " "), "text", _retrieval(import_documents)),
    Importer("retrieval_qa", ["tsv", "jsonl"],
             lambda n, t: {"topic_id": f"T{n}", "initial_request": t, "facet_id": f"F{n}", "facet_desc": "d",
                           "question_id": f"Q{n}", "question": "which?", "answer": "that one"},
             ("answer", ""), "initial_request", _retrieval(import_clarification_qa)),
]

for _imp in IMPORTERS:
    globals()[f"test_fuzz_{_imp.name}"] = fuzz(_imp)


@FUZZ
@given(kinds=st.lists(st.sampled_from(["good", "good", "good", "wrong_value", "short", "not_utf8", "unknown"]),
                      min_size=1, max_size=10))
def test_fuzz_trec_qrels(kinds):
    """TREC qrels lines (record = line number): a bad relevance, a line with a missing column, bytes that are not
    UTF-8, and a judgement of an unknown facet are quarantined; every good line is kept."""
    lines, expect, good = [], {}, []
    for n, kind in enumerate(kinds, 1):
        line = {"good": f"F{n} 0 D{n} 1", "wrong_value": f"F{n} 0 D{n} x", "short": f"F{n} 0 D{n}",
                "not_utf8": f"F{n} 0 D{n} {BAD_BYTES}", "unknown": f"NOPE 0 D{n} 1"}[kind]
        lines.append(line)
        if kind == "good":
            good.append(n)
        else:
            expect[n] = {"wrong_value": "rel", "unknown": "qid"}.get(kind)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "qrels.txt"
        path.write_bytes(("\n".join(lines) + "\n").encode().replace(BAD_BYTES.encode(), b"\xff"))
        imp = import_qrels(path, [f"F{i}" for i in range(1, 11)], [f"D{i}" for i in range(1, 11)])
    assert sorted(imp.kept["record"].to_list()) == good
    rejected = imp.rejected.to_dicts()
    assert sorted(r["record"] for r in rejected) == sorted(expect)
    for r in rejected:
        assert r["file"] == path.as_posix() and r["reason"] and r["field"]
        if expect[r["record"]]:
            assert r["field"] == expect[r["record"]]


@FUZZ
@given(kinds=st.lists(st.sampled_from(["good", "good", "wrong_value", "short", "not_utf8"]), min_size=1, max_size=10))
def test_fuzz_trec_runs(kinds):
    """TREC run lines: a rank that is not an integer, a missing column, bytes that are not UTF-8 are quarantined;
    every good line is kept."""
    lines = [{"good": f"q{n} Q0 D{n} 1 0.5 run", "wrong_value": f"q{n} Q0 D{n} first 0.5 run",
              "short": f"q{n} Q0 D{n} 1 0.5", "not_utf8": f"q{n} Q0 D{n} 1 0.5 {BAD_BYTES}"}[k]
             for n, k in enumerate(kinds, 1)]
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "run.txt"
        path.write_bytes(("\n".join(lines) + "\n").encode().replace(BAD_BYTES.encode(), b"\xff"))
        runs, q = parse_trec_run(read_lines(path), path.as_posix())
    assert runs["query_id"].to_list() == [f"q{n}" for n, k in enumerate(kinds, 1) if k == "good"]
    assert [r["record"] for r in q.rows] == [n for n, k in enumerate(kinds, 1) if k != "good"]
    assert all(r["file"] == path.as_posix() and r["reason"] and r["field"] for r in q.rows)
    assert [r["field"] for r in q.rows if r["record"] in {n for n, k in enumerate(kinds, 1) if k == "wrong_value"}] \
        == ["rank"] * kinds.count("wrong_value")


def test_every_record_importer_is_fuzzed():
    """The io/formats modules fuzzed here (retrieval: documents and QA; trec: the two tests above) all exist, so a
    renamed module is noticed; a module not listed here refuses a file with a bad record instead of quarantining."""
    formats = {p.stem for p in Path(__file__).resolve().parents[2].joinpath("dagster_project/io/formats").glob("*.py")}
    modules = {i.name.removesuffix("_documents").removesuffix("_qa") if i.name.startswith("retrieval") else i.name
               for i in IMPORTERS} | {"trec"}
    assert modules == {"clariq", "clamber", "in3", "dialogues", "ambigqa", "nq_open", "qa_generic", "clarify_jsonl",
                       "chat_logs", "intents", "retrieval", "trec"} and modules <= formats
