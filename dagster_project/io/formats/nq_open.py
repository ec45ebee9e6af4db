"""NQ-Open (Lee et al., 2019): JSONL ``{"question", "answer": [strings]}`` with an optional ``id``.

Every distinct answer string is its own item (reading), unless the input says ``answers_are_aliases``
(then the answers are aliases of one reading). A record without an id gets a hash of its question.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from dagster_project.io.formats.qa_generic import Aliases, QARecord, Strict, Text, validate
from dagster_project.io.records import MAX_FIELD_CHARS, Quarantine, RequiredColumns, iter_records


class NQOpenRecord(Strict):
    id: Text | int | None = None
    question: Text
    answer: Aliases


def question_id(prefix: str, question: str) -> str:
    """A stable id from the question text (case and surrounding space ignored)."""
    return f"{prefix}-{hashlib.sha1(question.strip().lower().encode()).hexdigest()[:10]}"


def read_nq_open(path: str | Path, quarantine: Quarantine | None = None, answers_are_aliases: bool = False,
                 key: str | None = None, max_field_chars: int = MAX_FIELD_CHARS) -> tuple[list[QARecord], Quarantine]:
    """NQ-Open JSONL; record numbers are 1-based line numbers (`key`: the params key naming the file)."""
    q = quarantine if quarantine is not None else Quarantine()
    columns = RequiredColumns(Path(path).as_posix(), ("question", "answer"), key)
    out = []
    for rec in iter_records(path, key=key, max_field_chars=max_field_chars):
        columns.see(rec.data if not rec.problem else None)
        parsed = validate(NQOpenRecord, rec, q)
        if parsed is None:
            continue
        items = [(parsed.answer, None)] if answers_are_aliases else [([a], None) for a in parsed.answer]
        qid = str(parsed.id) if parsed.id is not None else question_id("nq", parsed.question)
        out.append(QARecord(rec.file, rec.record, qid, parsed.question, items))
    columns.check()
    return out, q
