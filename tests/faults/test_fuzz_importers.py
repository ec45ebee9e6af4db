"""Every importer fuzzed with Hypothesis-generated broken files (issue 16 item 3): records with missing keys and
wrong types, serialised as JSONL / JSON arrays / CSV / TSV, then bytes deleted, inserted (brackets, quotes,
newlines, invalid UTF-8) or cut off. Whatever the file, an importer never crashes (a whole-file problem is an
InputFileError naming the file), reads as many records as an independent count finds (io.records.count_records),
accounts for each one (read == kept + rejected) and gives every rejection a file, record, field and reason.

Examples per importer: CLARIFY_FUZZ_EXAMPLES (default 25, a few seconds each in `make test`). With -s the
records in / kept / rejected per importer are printed at the end (CLARIFY_FUZZ_REPORT=path also writes them).
"""

import csv
import io
import json
import os
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import date
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dagster_project.config import IntentsConfig, LogsConfig
from dagster_project.core.clarifymt.external import import_dataset
from dagster_project.core.clarilm.logs import load_logs
from dagster_project.core.double_turn.qa import read_qa_file
from dagster_project.core.intents.utterances import validate_utterances
from dagster_project.io.formats.intents import read_utterances
from dagster_project.io.formats.retrieval import QA_REQUIRED, import_clarification_qa, import_documents, import_qrels
from dagster_project.io.records import InputFileError, count_records
from dagster_project.io.scan import UNPARSED, split_array

EXAMPLES = int(os.environ.get("CLARIFY_FUZZ_EXAMPLES", "25"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=not os.environ.get("CLARIFY_FUZZ_RANDOM"),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
STATS: dict[str, Counter] = defaultdict(Counter)
INTENTS = ["greeting", "refund", "delivery"]

text = st.text(min_size=1, max_size=24)
small_id = st.sampled_from(["a", "b", "c", "d", 7])
junk = st.one_of(st.none(), st.integers(-3, 3), st.booleans(), text, st.lists(text, max_size=2), st.just({}))


@st.composite
def record(draw, fields: dict[str, st.SearchStrategy]) -> dict:
    """One record from per-field strategies: a field may be replaced by a wrong value, or one may be missing."""
    row = {k: draw(junk if draw(st.integers(0, 11)) == 0 else v) for k, v in fields.items()}
    if draw(st.integers(0, 9)) == 0:
        row.pop(draw(st.sampled_from(list(fields))))
    return row


def records(fields: dict[str, st.SearchStrategy], max_size: int = 6) -> st.SearchStrategy:
    return st.lists(record(fields), max_size=max_size)


def _cell(v) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def serialise(rows: list[dict], fmt: str, columns: list[str]) -> bytes:
    if fmt == "jsonl":
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()
    if fmt in ("json", "json_pretty"):
        return json.dumps(rows, ensure_ascii=False, indent=2 if fmt == "json_pretty" else None).encode()
    buf = io.StringIO()
    w = csv.writer(buf, delimiter="," if fmt == "csv" else "\t", lineterminator="\n")
    w.writerow(columns)
    w.writerows([[_cell(r.get(c, "")) for c in columns] for r in rows])
    return buf.getvalue().encode()


NASTY = [b"{", b"}", b"[", b"]", b",", b'"', b"\n", b"\\", b":", b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00",
         b'"}, {"', b"\r\n", b"NaN", b"9" * 30]


@st.composite
def broken(draw, data: bytes) -> bytes:
    """`data` with up to three byte-level faults: a span deleted, nasty bytes inserted, the tail cut off."""
    for _ in range(draw(st.sampled_from([0, 1, 1, 2, 3]))):
        at = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["delete", "insert", "insert", "cut"]))
        if op == "delete":
            data = data[:at] + data[at + draw(st.integers(1, 12)):]
        elif op == "insert":
            data = data[:at] + draw(st.one_of(st.sampled_from(NASTY), st.binary(max_size=4))) + data[at:]
        else:
            data = data[:at]
    return data


Run = Callable[[Path], tuple[int, int, list[dict]]]


def check(name: str, path: Path, run: Run, counted: bool = True) -> None:
    """The invariants, and the figures for the report."""
    STATS[name]["files"] += 1
    try:
        read, kept, rejected = run(path)
    except InputFileError as err:
        assert path.name in str(err)
        STATS[name]["whole_file_errors"] += 1
        return
    assert read == kept + len(rejected), (read, kept, len(rejected))
    if counted:
        assert read == count_records(path)
    for r in rejected:
        assert r["file"] == path.as_posix() and isinstance(r["record"], int) and r["record"] >= 1, r
        assert r["field"] and r["reason"], r
    STATS[name].update({"records_in": read, "kept": kept, "rejected": len(rejected)})


def fuzz(name: str, fields: dict[str, st.SearchStrategy], formats: list[str], suffix: dict[str, str], run: Run,
         counted: bool = True):
    """One Hypothesis test for one importer."""
    @FUZZ
    @given(rows=records(fields), fmt=st.sampled_from(formats), data=st.data())
    def test(rows, fmt, data):
        content = data.draw(broken(serialise(rows, fmt, list(fields))))
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / f"input{suffix[fmt]}"
            path.write_bytes(content)
            check(name, path, run, counted)
    return test


SUFFIX = {"jsonl": ".jsonl", "json": ".json", "json_pretty": ".json", "csv": ".csv", "tsv": ".tsv"}
turn = st.fixed_dictionaries({"from": st.sampled_from(["human", "gpt", "system", "robot"]), "value": text})


def _logs(path: Path):
    cfg = LogsConfig(paths=[str(path)], default_log_date="2024-05-01", max_message_chars=20)
    _, rejected, stats = load_logs([path], cfg)
    assert stats.file_records[path.as_posix()] == stats.file_counted[path.as_posix()]
    return stats.records_read, stats.conversations_kept, rejected.to_dicts()


def _external(fmt: str) -> Run:
    def run(path: Path):
        res = import_dataset("x", fmt, path, max_field_chars=16)
        return res.records, res.turns.height + res.merged, res.rejected.rows
    return run


def _qa(fmt: str) -> Run:
    def run(path: Path):
        f = read_qa_file(path, fmt)
        return f.n_read, len(f.records), f.quarantine.rows
    return run


def _utterances(path: Path):
    records = read_utterances(path)
    kept, rejected = validate_utterances(records, path.as_posix(), INTENTS, IntentsConfig())
    return len(records), kept.height, rejected.rows


def _imported(fn) -> Run:
    def run(path: Path):
        imp = fn(path, max_field_chars=16)
        return imp.n_records, imp.kept.height, imp.rejected.to_dicts()
    return run


def _qrels(path: Path):
    imp = import_qrels(path, ["F1", "F2"], ["D1", "D2"])
    return imp.n_records, imp.kept.height, imp.rejected.to_dicts()


test_fuzz_chat_logs = fuzz("chat_logs", {
    "id": small_id, "timestamp": st.sampled_from(["2024-05-01T10:00:00Z", "yesterday", 1714557600]),
    "conversations": st.lists(turn, max_size=3)}, ["jsonl", "json", "json_pretty"], SUFFIX, _logs)
test_fuzz_external_clamber = fuzz("external_clamber", {
    "id": small_id, "question": text, "require_clarification": st.sampled_from([0, 1, "1", "maybe"]),
    "clarifying_question": text}, ["jsonl", "json"], SUFFIX, _external("clamber"))
test_fuzz_external_in3 = fuzz("external_in3", {
    "task": text, "vague": st.sampled_from([True, False, "true", "maybe"]), "category": text,
    "missing_details": st.lists(st.fixed_dictionaries({"inquiry": text, "importance": st.sampled_from(["1", "3", 2])}),
                                max_size=2)}, ["jsonl"], SUFFIX, _external("in3"))
test_fuzz_external_generic = fuzz("external_generic", {
    "dialogue_id": st.sampled_from(["d1", "d2"]), "turn": st.integers(0, 3), "user": text,
    "reference_action": st.sampled_from(["clarify", "answer", "maybe"]), "reference_question": text},
    ["jsonl", "csv"], SUFFIX, _external("generic"))
test_fuzz_external_clariq = fuzz("external_clariq", {
    "topic_id": small_id, "initial_request": text, "clarification_need": st.integers(0, 5), "question": text},
    ["tsv"], SUFFIX, _external("clariq"))
test_fuzz_qa_ambigqa = fuzz("qa_ambigqa", {
    "id": small_id, "question": text,
    "annotations": st.lists(st.fixed_dictionaries({"type": st.just("singleAnswer"), "answer": st.lists(text)}),
                            max_size=2)}, ["json", "json_pretty"], SUFFIX, _qa("ambigqa"))
test_fuzz_qa_nq_open = fuzz("qa_nq_open", {"id": small_id, "question": text, "answer": st.lists(text, max_size=3)},
                            ["jsonl"], SUFFIX, _qa("nq_open"))
test_fuzz_qa_generic = fuzz("qa_generic", {
    "id": small_id, "question": text, "answers": st.lists(st.lists(text, max_size=2), max_size=2)},
    ["jsonl", "csv"], SUFFIX, _qa("generic"))
test_fuzz_intent_utterances = fuzz("intent_utterances", {
    "text": text, "intent": st.sampled_from([*INTENTS, "bogus"]), "split": st.sampled_from(["train", "test", "x"])},
    ["jsonl", "json", "csv"], SUFFIX, _utterances)
test_fuzz_retrieval_documents = fuzz("retrieval_documents", {"doc_id": small_id, "text": text, "title": text},
                                     ["jsonl", "csv"], SUFFIX, _imported(import_documents))
test_fuzz_retrieval_qa = fuzz("retrieval_qa", {c: (small_id if c.endswith("_id") else text) for c in QA_REQUIRED},
                              ["tsv", "jsonl"], SUFFIX, _imported(import_clarification_qa))


@FUZZ
@given(lines=st.lists(st.tuples(st.sampled_from(["F1", "F2", "F9"]), st.sampled_from(["0", "Q0"]),
                                st.sampled_from(["D1", "D2", "D7"]), st.sampled_from(["0", "1", "2", "x"])),
                      max_size=8), data=st.data())
def test_fuzz_retrieval_qrels(lines, data):
    content = data.draw(broken("".join(" ".join(t) + "\n" for t in lines).encode()))
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "qrels.txt"
        path.write_bytes(content)
        check("retrieval_qrels", path, _qrels, counted=False)


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                           lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(), kids, max_size=3),
                           max_leaves=12)


@FUZZ
@given(items=st.lists(json_values, max_size=6), indent=st.sampled_from([None, 0, 2]), ascii_only=st.booleans(),
       chunk=st.sampled_from([3, 17, 1 << 20]))
def test_fuzz_array_splitter_agrees_with_json_on_valid_arrays(items, indent, ascii_only, chunk):
    """On a valid array the splitter finds exactly json.loads' items, whether an item is parsed on the fast path
    or (small chunks: items cross the buffer's end) located by the tokenizer."""
    data = json.dumps(items, indent=indent, ensure_ascii=ascii_only).encode()
    found = list(split_array(io.BytesIO(data), chunk))
    assert [json.loads(t) if v is UNPARSED else v for t, v in found] == json.loads(data)


@pytest.fixture(scope="module", autouse=True)
def _report():
    """Print (and with CLARIFY_FUZZ_REPORT, write) the records in / kept / rejected per fuzzed importer."""
    yield
    table = {k: dict(v) for k, v in sorted(STATS.items())}
    print("\nfuzzed importers:", json.dumps(table, indent=1))
    if out := os.environ.get("CLARIFY_FUZZ_REPORT"):
        Path(out).write_text(json.dumps({"examples": EXAMPLES, "date": date.today().isoformat(), **table}, indent=1))
