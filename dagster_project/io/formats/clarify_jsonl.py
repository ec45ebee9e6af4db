"""The double-turn paper's released data (Zhang, Knox & Choi; ``data/{ambigqa,nqopen}.*.clarify.jsonl`` in
github.com/mikejqzhang/clarifying_questions): JSONL, one question per line.

Fields: ``id``, ``question``, ``answers`` (the answer set, one string per interpretation: human-identified in the
AmbigQA files, model-identified in the NQ-Open files), ``nq_answers`` (NQ-Open's own answers), and in the AmbigQA
files ``isambig`` and ``disambiguations`` ([{"question", "answer": [aliases]}], in the order of ``answers``); every
record also carries the ``clarification`` the paper generated ({"question", "answers": [{"answer", "response"}]}).

Each string of the answer set is one item, scored by its own text as the paper's metric does (src/metrics.py
compares normalised strings, no aliases); when ``disambiguations`` runs parallel to ``answers`` (same length),
item i carries disambiguation i's question. ``answers_key="nq_answers"`` takes NQ-Open's answers as the set
instead (the paper's "NQ-Open evaluation").
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from dagster_project.io.formats.qa_generic import Aliases, QARecord, Strict, Text, validate
from dagster_project.io.records import MAX_FIELD_CHARS, Quarantine, RequiredColumns, iter_records


class Disambiguation(Strict):
    question: Text
    answer: Aliases


class ClarifyingAnswer(Strict):
    answer: str | None = None
    response: str | None = None


class Clarification(Strict):
    question: str | None = None
    answers: list[ClarifyingAnswer] = []


class ClarifyRecord(Strict):
    id: Text | int
    question: Text
    answers: Aliases
    nq_answers: list[Text] | None = None
    isambig: bool | None = None
    disambiguations: list[Disambiguation] | None = None
    clarification: Clarification | None = None


class NQAnswersRecord(ClarifyRecord):
    nq_answers: Annotated[list[Text], Field(min_length=1)]


def read_clarify_jsonl(path: str | Path, quarantine: Quarantine | None = None, key: str | None = None,
                       answers_key: Literal["answers", "nq_answers"] = "answers",
                       max_field_chars: int = MAX_FIELD_CHARS) -> tuple[list[QARecord], Quarantine]:
    """The paper's ``*.clarify.jsonl``; record numbers are 1-based line numbers. A malformed record is
    quarantined with its field (`key`: the params key that names the file, for the error message)."""
    q = quarantine if quarantine is not None else Quarantine()
    model = NQAnswersRecord if answers_key == "nq_answers" else ClarifyRecord
    columns = RequiredColumns(Path(path).as_posix(), ("id", "question", answers_key), key)
    out = []
    for rec in iter_records(path, key=key, max_field_chars=max_field_chars):
        columns.see(rec.data if not rec.problem else None)
        parsed = validate(model, rec, q)
        if parsed is None:
            continue
        answers = parsed.nq_answers if answers_key == "nq_answers" else parsed.answers
        dis = parsed.disambiguations if answers_key == "answers" else None
        questions = [d.question for d in dis] if dis and len(dis) == len(answers) else [None] * len(answers)
        items = [([a], dq) for a, dq in zip(answers, questions, strict=True)]
        out.append(QARecord(rec.file, rec.record, str(parsed.id), parsed.question, items))
    columns.check()
    return out, q
