"""ClariMM retrieval inputs on top of io.records: single-turn clarification QA (ClariQ / Melon shape, the ClariQ
TSV read as-is), a document collection and TREC qrels whose qid is a facet id. Each is validated record by
record: what cannot be used goes to a Quarantine with a reason; only an unusable file raises InputFileError.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from dagster_project.io.formats.trec import parse_qrels, read_lines
from dagster_project.io.records import (
    MAX_FIELD_CHARS,
    InputFileError,
    Quarantine,
    Record,
    RequiredColumns,
    iter_records,
)

QA_REQUIRED = ("topic_id", "initial_request", "facet_id", "facet_desc", "question_id", "question", "answer")
DOC_REQUIRED = ("doc_id", "text")

QA_SCHEMA = {
    "qa_id": pl.Utf8, "topic_id": pl.Utf8, "initial_request": pl.Utf8, "topic_desc": pl.Utf8, "facet_id": pl.Utf8,
    "facet_desc": pl.Utf8, "question_id": pl.Utf8, "question": pl.Utf8, "answer": pl.Utf8,
    "images": pl.List(pl.Utf8), "source": pl.Utf8, "record": pl.Int64,
}
DOC_SCHEMA = {"doc_id": pl.Utf8, "title": pl.Utf8, "text": pl.Utf8, "source": pl.Utf8, "record": pl.Int64}
QRELS_SCHEMA = {"qid": pl.Utf8, "doc_id": pl.Utf8, "rel": pl.Int64, "source": pl.Utf8, "record": pl.Int64}


@dataclass(frozen=True)
class Imported:
    """Kept rows, the quarantine frame (file, record, field, reason, raw) and the number of records read."""

    kept: pl.DataFrame
    rejected: pl.DataFrame
    n_records: int

    def summary(self) -> dict[str, int]:
        return {"records": self.n_records, "kept": self.kept.height, "rejected": self.rejected.height}


def _records(path: str | Path, required: Sequence[str], key: str, max_field_chars: int) -> Iterator[Record]:
    """The file's records; a file that cannot be read, a CSV / TSV / Parquet file whose header lacks a required
    column, or a JSON / JSONL file where no record has one, raises InputFileError naming the file, the columns
    and the params key (a single JSON record without one is quarantined by the caller)."""
    table = Path(path).name.lower().removesuffix(".gz").endswith((".csv", ".tsv", ".tab", ".parquet"))
    columns = RequiredColumns(Path(path).as_posix(), tuple(required), key)
    checked = not table
    try:
        for rec in iter_records(path, max_field_chars=max_field_chars):
            if not checked and rec.problem is None:
                checked = True
                missing = [c for c in required if c not in rec.data]
                if missing:
                    raise InputFileError(rec.file, f"missing column(s) {missing}; found {sorted(rec.data)}; "
                                                   f"required: {list(required)}", key=key)
            columns.see(rec.data if rec.problem is None else None)
            yield rec
        columns.check()
    except InputFileError as err:
        if err.key:
            raise
        problem = str(err).removeprefix(f"{err.file}: ")
        raise InputFileError(err.file, problem, err.record, err.field, key) from None


def _text(value: Any) -> str | None:
    """A non-empty stripped string (ids may come as numbers), else None."""
    if value is None or isinstance(value, (bool, dict, list)):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    s = str(value).strip()
    return s or None


def _unreadable(q: Quarantine, rec: Record) -> bool:
    """Quarantine a record io.records could not parse; True when it did."""
    if rec.problem is None:
        return False
    q.add_record(rec, f"{rec.problem}: {rec.detail}")
    return True


def parse_images(value: Any) -> list[str]:
    """Image references of one question: a list, a JSON list string, or a '|' / ';' separated string."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        items = value
    elif isinstance(value, str):
        s = value.strip()
        if not s:
            return []
        if s.startswith("["):
            items = json.loads(s)  # ValueError -> quarantined by the caller
            if not isinstance(items, list):
                raise ValueError("images: expected a JSON list")
        else:
            items = s.replace(";", "|").split("|")
    else:
        raise TypeError(f"images: expected a list or a string, got {type(value).__name__}")
    return [str(i).strip() for i in items if str(i).strip()]


def import_clarification_qa(path: str | Path, key: str = "retrieval.qa_path",
                            max_field_chars: int = MAX_FIELD_CHARS) -> Imported:
    """Validate single-turn clarification QA (one row per facet x question) record by record.

    Quarantined: unparseable records, an empty required field (ClariQ's 'no question' rows Q00001 have an
    empty question and answer), unreadable image lists, a repeated (facet_id, question_id) and a facet
    that appears under a second topic. qa_id = facet_id/question_id.
    """
    source = Path(path).name
    q, kept, n_records = Quarantine(), [], 0
    seen: dict[tuple[str, str], int] = {}
    facet_topic: dict[str, tuple[str, int]] = {}
    for rec in _records(path, QA_REQUIRED, key, max_field_chars):
        n_records += 1
        if _unreadable(q, rec):
            continue
        values = {c: _text(rec.data.get(c)) for c in QA_REQUIRED}
        empty = [c for c in QA_REQUIRED if values[c] is None]
        if empty:
            q.add_record(rec, f"empty or missing field {empty[0]!r}", empty[0])
            continue
        try:
            images = parse_images(rec.data.get("images"))
        except (ValueError, TypeError) as e:
            q.add_record(rec, f"unreadable image list: {e}", "images")
            continue
        pair = (values["facet_id"], values["question_id"])
        if pair in seen:
            q.add_record(rec, f"duplicate facet/question pair {pair[0]}/{pair[1]} (first at record {seen[pair]})",
                         "question_id")
            continue
        owner = facet_topic.get(values["facet_id"])
        if owner and owner[0] != values["topic_id"]:
            q.add_record(rec, f"facet {values['facet_id']} already belongs to topic {owner[0]} (record {owner[1]})",
                         "facet_id")
            continue
        seen[pair] = rec.record
        facet_topic.setdefault(values["facet_id"], (values["topic_id"], rec.record))
        kept.append({"qa_id": f"{pair[0]}/{pair[1]}", **values, "topic_desc": _text(rec.data.get("topic_desc")),
                     "images": images, "source": source, "record": rec.record})
    return Imported(pl.DataFrame(kept, schema=QA_SCHEMA), q.frame(), n_records)


def import_documents(path: str | Path, key: str = "retrieval.documents_path",
                     max_field_chars: int = MAX_FIELD_CHARS) -> Imported:
    """Validate a document collection (doc_id, text, optional title); empty text or a repeated id is quarantined."""
    source = Path(path).name
    q, kept, n_records = Quarantine(), [], 0
    seen: dict[str, int] = {}
    for rec in _records(path, DOC_REQUIRED, key, max_field_chars):
        n_records += 1
        if _unreadable(q, rec):
            continue
        doc_id, text = _text(rec.data.get("doc_id")), _text(rec.data.get("text"))
        if doc_id is None or text is None:
            field = "doc_id" if doc_id is None else "text"
            q.add_record(rec, f"empty or missing field {field!r}", field)
            continue
        if doc_id in seen:
            q.add_record(rec, f"duplicate doc_id {doc_id} (first at record {seen[doc_id]})", "doc_id")
            continue
        seen[doc_id] = rec.record
        kept.append({"doc_id": doc_id, "title": _text(rec.data.get("title")), "text": text, "source": source,
                     "record": rec.record})
    return Imported(pl.DataFrame(kept, schema=DOC_SCHEMA), q.frame(), n_records)


def import_qrels(path: str | Path, facet_ids: Iterable[str], doc_ids: Iterable[str],
                 key: str = "retrieval.qrels_path") -> Imported:
    """TREC qrels whose qid is a facet id; unknown facets / documents and repeated pairs are quarantined."""
    file = Path(path).as_posix()
    lines = read_lines(path, key)
    rows, q = parse_qrels(lines, file)
    facets, docs = set(facet_ids), set(doc_ids)
    kept, seen = [], {}
    for r in rows:
        raw = f"{r['qid']} 0 {r['doc_id']} {r['rel']}"
        pair = (r["qid"], r["doc_id"])
        if r["qid"] not in facets:
            q.add(file, r["record"], f"unknown facet id {r['qid']}", "qid", raw)
        elif r["doc_id"] not in docs:
            q.add(file, r["record"], f"unknown doc id {r['doc_id']}", "doc_id", raw)
        elif pair in seen:
            q.add(file, r["record"], f"duplicate judgement {pair[0]}/{pair[1]} (first at line {seen[pair]})",
                  "doc_id", raw)
        else:
            seen[pair] = r["record"]
            kept.append(r)
    n_records = sum(1 for s in lines if s.strip() and not s.strip().startswith("#"))
    return Imported(pl.DataFrame(kept, schema=QRELS_SCHEMA), q.frame().sort("record", maintain_order=True),
                    n_records)
