"""Generic open-domain QA files (double-turn paper §4 Data): JSONL or CSV with ``id``, ``question``,
``answers`` (a list of alias lists; in CSV a JSON-encoded cell) and optional ``disambiguated_questions``
(a list parallel to ``answers``, entries may be null).

Also the record shape the QA formats share (ambigqa, nq_open): a question with its answers as the file
gives them, one (aliases, disambiguated question) item per reading; merging readings that share an
alias is the method's business (core/double_turn/qa.py). A malformed record goes to the Quarantine with
the field that is wrong; a file that cannot be used at all raises InputFileError.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from dagster_project.io.records import (
    MAX_FIELD_CHARS,
    WHOLE_RECORD,
    InputFileError,
    Quarantine,
    Record,
    RequiredColumns,
    iter_records,
)

Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
Aliases = Annotated[list[Text], Field(min_length=1)]
Item = tuple[list[str], str | None]
M = TypeVar("M", bound=BaseModel)


class Strict(BaseModel):
    """A QA record schema: strict types, unknown keys ignored."""

    model_config = ConfigDict(extra="ignore", strict=True)


@dataclass(frozen=True)
class QARecord:
    """One question of a QA file: its id, text and (aliases, disambiguated question) items in file order."""

    file: str
    record: int
    id: str
    question: str
    items: list[Item]


def field_path(loc: tuple[Any, ...]) -> str:
    """pydantic error location -> 'annotations[1].qaPairs[0].answer' (union tag names dropped)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("singleAnswer", "multipleQAs", "str", "int", "constrained-str"):
            continue
        else:
            out += f".{part}" if out else str(part)
    return out or WHOLE_RECORD


def validate(model: type[M], rec: Record, quarantine: Quarantine) -> M | None:
    """The record as `model`, or None after quarantining it with the first wrong field."""
    if rec.problem:
        quarantine.add_record(rec, f"{rec.problem}: {rec.detail}")
        return None
    try:
        return model.model_validate(rec.data)
    except ValidationError as err:
        first = err.errors()[0]
        more = f" (+{err.error_count() - 1} more)" if err.error_count() > 1 else ""
        quarantine.add_record(rec, f"{first['msg']}{more}", field_path(first["loc"]))
        return None


class GenericRecord(Strict):
    id: Text | int
    question: Text
    answers: Annotated[list[Aliases], Field(min_length=1)]
    disambiguated_questions: list[str | None] | None = None


_REQUIRED = ("id", "question", "answers")
_JSON_CELLS = ("answers", "disambiguated_questions")


def _is_table(path: Path) -> bool:
    return path.name.lower().removesuffix(".gz").endswith((".csv", ".tsv"))


def _decode_cells(rec: Record, quarantine: Quarantine, key: str | None) -> Record | None:
    """A CSV row with its JSON cells decoded; a row whose cell is not JSON is quarantined (None)."""
    row = rec.data
    missing = [c for c in _REQUIRED if c not in row]
    if missing:
        raise InputFileError(rec.file, f"CSV lacks column(s) {missing}; needs id, question, answers "
                                       "(JSON list of alias lists)", key=key)
    obj: dict[str, Any] = {"id": row["id"], "question": row["question"]}
    for col in _JSON_CELLS:
        cell = (row.get(col) or "").strip()
        if not cell:
            continue
        try:
            obj[col] = json.loads(cell)
        except json.JSONDecodeError as e:
            quarantine.add_record(rec, f"not valid JSON: {e.msg}", col)
            return None
    return Record(rec.file, rec.record, obj, rec.raw)


def read_generic(path: str | Path, quarantine: Quarantine | None = None, key: str | None = None,
                 max_field_chars: int = MAX_FIELD_CHARS) -> tuple[list[QARecord], Quarantine]:
    """Generic JSONL or CSV (id, question, answers = list of alias lists[, disambiguated_questions]);
    `key`: the params key that names the file, for the error message."""
    q = quarantine if quarantine is not None else Quarantine()
    table = _is_table(Path(path))
    columns = RequiredColumns(Path(path).as_posix(), _REQUIRED, key)
    out = []
    for rec in iter_records(path, key=key, max_field_chars=max_field_chars):
        columns.see(rec.data if not rec.problem else None)
        if table and not rec.problem:
            rec = _decode_cells(rec, q, key)
            if rec is None:
                continue
        parsed = validate(GenericRecord, rec, q)
        if parsed is None:
            continue
        dq = parsed.disambiguated_questions
        if dq is not None and len(dq) != len(parsed.answers):
            q.add_record(rec, f"has {len(dq)} entries but answers has {len(parsed.answers)}",
                         "disambiguated_questions")
            continue
        items = [(a, dq[j] if dq else None) for j, a in enumerate(parsed.answers)]
        out.append(QARecord(rec.file, rec.record, str(parsed.id), parsed.question, items))
    columns.check()
    return out, q
