"""AmbigQA (Min et al., 2020): a JSON list of ``{"id", "question", "annotations"}`` records.

Each annotation is ``{"type": "singleAnswer", "answer": [aliases]}`` or ``{"type": "multipleQAs",
"qaPairs": [{"question": disambiguated question, "answer": [aliases]}]}``; every answer of every
annotation is one item (readings that share an alias are merged later, core/double_turn/qa.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from dagster_project.io.formats.qa_generic import Aliases, QARecord, Strict, Text, validate
from dagster_project.io.records import MAX_FIELD_CHARS, InputFileError, Quarantine, RequiredColumns, iter_records


class SingleAnswer(Strict):
    type: Literal["singleAnswer"]
    answer: Aliases


class QAPair(Strict):
    question: Text
    answer: Aliases


class MultipleQAs(Strict):
    type: Literal["multipleQAs"]
    qaPairs: Annotated[list[QAPair], Field(min_length=1)]  # noqa: N815 - AmbigQA's field name


class AmbigQARecord(Strict):
    id: Text | int
    question: Text
    annotations: Annotated[list[Annotated[SingleAnswer | MultipleQAs, Field(discriminator="type")]],
                           Field(min_length=1)]


def _require_list(path: Path, key: str | None) -> None:
    """AmbigQA's top level is a JSON list; anything else is the wrong file."""
    if not path.is_file():
        return  # iter_records names the missing file
    with path.open("rb") as f:
        head = f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
    if head != b"[":
        raise InputFileError(path.as_posix(), "top level must be a JSON list of records", key=key)


def read_ambigqa(path: str | Path, quarantine: Quarantine | None = None, key: str | None = None,
                 max_field_chars: int = MAX_FIELD_CHARS) -> tuple[list[QARecord], Quarantine]:
    """AmbigQA JSON; record numbers are 1-based list positions. A broken item is quarantined and the items after
    it are read (`key`: the params key that names the file, for the error message)."""
    q = quarantine if quarantine is not None else Quarantine()
    _require_list(Path(path), key)
    columns = RequiredColumns(Path(path).as_posix(), ("id", "question", "annotations"), key)
    out = []
    for rec in iter_records(path, key=key, max_field_chars=max_field_chars):
        columns.see(rec.data if not rec.problem else None)
        parsed = validate(AmbigQARecord, rec, q)
        if parsed is None:
            continue
        items: list[tuple[list[str], str | None]] = []
        for ann in parsed.annotations:
            if isinstance(ann, SingleAnswer):
                items.append((ann.answer, None))
            else:
                items.extend((p.answer, p.question) for p in ann.qaPairs)
        out.append(QARecord(rec.file, rec.record, str(parsed.id), parsed.question, items))
    columns.check()
    return out, q
