"""Importers for open-domain QA sets whose questions carry several acceptable answers (double-turn paper §4 Data).

One *interpretation* = one expected answer with its aliases (and, when the data gives one, the
disambiguated question). Formats:

- ``ambigqa``: a JSON list of ``{"id", "question", "annotations"}``; each annotation is
  ``{"type": "singleAnswer", "answer": [aliases]}`` or
  ``{"type": "multipleQAs", "qaPairs": [{"question": disambiguated question, "answer": [aliases]}]}``.
  Interpretations from all annotations of a record are merged when they share a normalised alias.
- ``nq_open``: JSONL ``{"question", "answer": [strings]}`` (optional ``id``); every distinct answer
  string is its own interpretation, unless the input says ``answers_are_aliases`` (then one interpretation).
- ``generic``: JSONL or CSV with columns ``id``, ``question``, ``answers`` (a list of alias lists; in CSV a
  JSON-encoded cell) and optional ``disambiguated_questions`` (a list parallel to ``answers``, entries may be null).

A file that cannot be read at all raises :class:`InputFileError` naming the file. A malformed record is
quarantined (a row in the rejected table naming file, record and field), never fatal.
"""

from __future__ import annotations

import csv
import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import polars as pl
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from dagster_project.core.double_turn.metrics import normalize_answer

FORMATS = ("ambigqa", "nq_open", "generic")


class InputFileError(ValueError):
    """A whole input file is unusable (missing, not JSON, wrong top-level shape, missing CSV columns)."""


# --------------------------------------------------------------------------- record schemas (pydantic)

_Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
_Aliases = Annotated[list[_Text], Field(min_length=1)]


class _Rec(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class _SingleAnswer(_Rec):
    type: Literal["singleAnswer"]
    answer: _Aliases


class _QAPair(_Rec):
    question: _Text
    answer: _Aliases


class _MultipleQAs(_Rec):
    type: Literal["multipleQAs"]
    qaPairs: Annotated[list[_QAPair], Field(min_length=1)]  # noqa: N815 - AmbigQA's field name


class _AmbigQARecord(_Rec):
    id: _Text | int
    question: _Text
    annotations: Annotated[list[Annotated[_SingleAnswer | _MultipleQAs, Field(discriminator="type")]],
                           Field(min_length=1)]


class _NQOpenRecord(_Rec):
    id: _Text | int | None = None
    question: _Text
    answer: _Aliases


class _GenericRecord(_Rec):
    id: _Text | int
    question: _Text
    answers: Annotated[list[_Aliases], Field(min_length=1)]
    disambiguated_questions: list[str | None] | None = None


# --------------------------------------------------------------------------- results

@dataclass
class ImportResult:
    """Records read from one file: usable ones and quarantined ones (with the reason)."""

    path: str
    format: str
    records: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)

    @property
    def n_read(self) -> int:
        return len(self.records) + len(self.rejected)


def _field_path(loc: tuple) -> str:
    """pydantic error location -> 'annotations[1].qaPairs[0].answer' (union tag names dropped)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("singleAnswer", "multipleQAs", "str", "int", "constrained-str"):
            continue
        else:
            out += f".{part}" if out else str(part)
    return out or "<record>"


def _reject(result: ImportResult, record: int, raw: Any, field_name: str, reason: str,
            record_id: str | None = None) -> None:
    text = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False, default=str)
    result.rejected.append({
        "source_file": result.path, "format": result.format, "record": record, "record_id": record_id,
        "field": field_name, "reason": reason, "raw": text[:500],
    })


def _reject_validation(result: ImportResult, record: int, raw: Any, err: ValidationError) -> None:
    first = err.errors()[0]
    rid = raw.get("id") if isinstance(raw, dict) else None
    more = f" (+{err.error_count() - 1} more)" if err.error_count() > 1 else ""
    _reject(result, record, raw, _field_path(first["loc"]), f"{first['msg']}{more}",
            None if rid is None else str(rid))


# --------------------------------------------------------------------------- interpretations

def merge_interpretations(items: list[tuple[list[str], str | None]]) -> list[dict[str, Any]]:
    """Merge (aliases, disambiguated question) items that share a normalised alias (union-find).

    Order follows first appearance; aliases are de-duplicated by normalised form (first spelling kept);
    the first non-empty disambiguated question of a merged group is kept.
    """
    parent = list(range(len(items)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}
    for i, (aliases, _) in enumerate(items):
        for a in aliases:
            key = normalize_answer(a)
            if not key:
                continue
            if key in owner:
                ri, rj = find(i), find(owner[key])
                if ri != rj:
                    parent[max(ri, rj)] = min(ri, rj)
            else:
                owner[key] = i
    groups: dict[int, dict[str, Any]] = {}
    for i, (aliases, question) in enumerate(items):
        g = groups.setdefault(find(i), {"answers": [], "question": None, "_seen": set()})
        for a in aliases:
            a = a.strip()
            key = normalize_answer(a) or a.lower()
            if a and key not in g["_seen"]:
                g["_seen"].add(key)
                g["answers"].append(a)
        if g["question"] is None and question and question.strip():
            g["question"] = question.strip()
    return [{"answers": g["answers"], "question": g["question"]} for g in groups.values() if g["answers"]]


def _record(result: ImportResult, index: int, qid: str, question: str,
            interpretations: list[dict[str, Any]]) -> dict[str, Any]:
    return {"query_id": qid, "question": question.strip(), "interpretations": interpretations,
            "source_file": result.path, "format": result.format, "record": index}


# --------------------------------------------------------------------------- readers

def _read_json_list(path: Path) -> list[Any]:
    if not path.exists():
        raise InputFileError(f"{path}: file not found")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise InputFileError(f"{path}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except UnicodeDecodeError as e:
        raise InputFileError(f"{path}: not UTF-8 text ({e.reason})") from None
    if not isinstance(data, list):
        raise InputFileError(f"{path}: top level must be a JSON list of records, got {type(data).__name__}")
    return data


def _iter_jsonl(path: Path, result: ImportResult):
    """(line number, object) for each non-blank line; lines that are not JSON objects are quarantined."""
    if not path.exists():
        raise InputFileError(f"{path}: file not found")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise InputFileError(f"{path}: not UTF-8 text ({e.reason})") from None
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            _reject(result, n, line, "<line>", f"not valid JSON: {e.msg} at column {e.colno}")
            continue
        if not isinstance(obj, dict):
            _reject(result, n, line, "<line>", f"expected a JSON object, got {type(obj).__name__}")
            continue
        yield n, obj


def read_ambigqa(path: str | Path) -> ImportResult:
    """AmbigQA JSON (a list of records); record numbers are 0-based list indices."""
    path = Path(path)
    result = ImportResult(str(path), "ambigqa")
    for i, raw in enumerate(_read_json_list(path)):
        try:
            rec = _AmbigQARecord.model_validate(raw)
        except ValidationError as err:
            _reject_validation(result, i, raw, err)
            continue
        items: list[tuple[list[str], str | None]] = []
        for ann in rec.annotations:
            if isinstance(ann, _SingleAnswer):
                items.append((ann.answer, None))
            else:
                items.extend((p.answer, p.question) for p in ann.qaPairs)
        result.records.append(_record(result, i, str(rec.id), rec.question, merge_interpretations(items)))
    return result


def _question_id(prefix: str, question: str) -> str:
    return f"{prefix}-{hashlib.sha1(question.strip().lower().encode()).hexdigest()[:10]}"


def read_nq_open(path: str | Path, answers_are_aliases: bool = False) -> ImportResult:
    """NQ-Open JSONL; record numbers are 1-based line numbers. Ids default to a hash of the question."""
    path = Path(path)
    result = ImportResult(str(path), "nq_open")
    for n, raw in _iter_jsonl(path, result):
        try:
            rec = _NQOpenRecord.model_validate(raw)
        except ValidationError as err:
            _reject_validation(result, n, raw, err)
            continue
        items = [(rec.answer, None)] if answers_are_aliases else [([a], None) for a in rec.answer]
        qid = str(rec.id) if rec.id is not None else _question_id("nq", rec.question)
        result.records.append(_record(result, n, qid, rec.question, merge_interpretations(items)))
    return result


def _generic_rows(path: Path, result: ImportResult):
    if path.suffix.lower() != ".csv":
        yield from _iter_jsonl(path, result)
        return
    if not path.exists():
        raise InputFileError(f"{path}: file not found")
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = {"id", "question", "answers"} - set(reader.fieldnames or [])
        if missing:
            raise InputFileError(f"{path}: CSV lacks column(s) {sorted(missing)}; "
                                 "needs id, question, answers (JSON list of alias lists)")
        for n, row in enumerate(reader, start=2):  # line 1 is the header
            obj: dict[str, Any] = {"id": row["id"], "question": row["question"]}
            ok = True
            for col in ("answers", "disambiguated_questions"):
                cell = (row.get(col) or "").strip()
                if not cell:
                    continue
                try:
                    obj[col] = json.loads(cell)
                except json.JSONDecodeError as e:
                    _reject(result, n, row, col, f"not valid JSON: {e.msg}", row.get("id"))
                    ok = False
                    break
            if ok:
                yield n, obj


def read_generic(path: str | Path) -> ImportResult:
    """Generic JSONL or CSV (id, question, answers = list of alias lists[, disambiguated_questions])."""
    path = Path(path)
    result = ImportResult(str(path), "generic")
    for n, raw in _generic_rows(path, result):
        try:
            rec = _GenericRecord.model_validate(raw)
        except ValidationError as err:
            _reject_validation(result, n, raw, err)
            continue
        dq = rec.disambiguated_questions
        if dq is not None and len(dq) != len(rec.answers):
            _reject(result, n, raw, "disambiguated_questions",
                    f"has {len(dq)} entries but answers has {len(rec.answers)}", str(rec.id))
            continue
        items = [(a, dq[j] if dq else None) for j, a in enumerate(rec.answers)]
        result.records.append(_record(result, n, str(rec.id), rec.question, merge_interpretations(items)))
    return result


def read_input(path: str | Path, fmt: str, answers_are_aliases: bool = False) -> ImportResult:
    if fmt == "ambigqa":
        return read_ambigqa(path)
    if fmt == "nq_open":
        return read_nq_open(path, answers_are_aliases)
    if fmt == "generic":
        return read_generic(path)
    raise InputFileError(f"{path}: unknown format {fmt!r}; known: {list(FORMATS)}")


# --------------------------------------------------------------------------- tables

QA_SCHEMA = {
    "query_id": pl.Utf8, "question": pl.Utf8, "answers": pl.List(pl.List(pl.Utf8)),
    "gold_answers": pl.List(pl.Utf8), "disambiguated_questions": pl.List(pl.Utf8),
    "n_interpretations": pl.Int64, "is_ambiguous": pl.Boolean, "split": pl.Utf8,
    "source_file": pl.Utf8, "format": pl.Utf8, "record": pl.Int64,
    "file_records": pl.Int64, "file_rejected": pl.Int64,
}
REJECTED_SCHEMA = {"source_file": pl.Utf8, "format": pl.Utf8, "record": pl.Int64, "record_id": pl.Utf8,
                   "field": pl.Utf8, "reason": pl.Utf8, "raw": pl.Utf8}


def qa_tables(results: list[tuple[ImportResult, str]]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(qa_sets, qa_sets_rejected) from several files; a repeated query id is quarantined too.

    ``results`` pairs each file's ImportResult with its split (train / eval / both). qa_sets carries
    ``file_records`` and ``file_rejected`` so that kept + rejected == records read can be checked per file.
    """
    seen: dict[str, str] = {}
    rows, rejected = [], []
    for res, split in results:
        kept = []
        for r in res.records:
            if r["query_id"] in seen:
                _reject(res, r["record"], {"id": r["query_id"], "question": r["question"]}, "id",
                        f"duplicate id (first seen in {seen[r['query_id']]})", r["query_id"])
                continue
            seen[r["query_id"]] = res.path
            kept.append(r)
        for r in kept:
            interp = r["interpretations"]
            rows.append({
                "query_id": r["query_id"], "question": r["question"],
                "answers": [i["answers"] for i in interp], "gold_answers": [i["answers"][0] for i in interp],
                "disambiguated_questions": [i["question"] for i in interp],
                "n_interpretations": len(interp), "is_ambiguous": len(interp) > 1, "split": split,
                "source_file": r["source_file"], "format": r["format"], "record": r["record"],
                "file_records": res.n_read, "file_rejected": len(res.rejected),
            })
        rejected.extend(res.rejected)
    return pl.DataFrame(rows, schema=QA_SCHEMA), pl.DataFrame(rejected, schema=REJECTED_SCHEMA)


def select_queries(qa: pl.DataFrame, max_queries: int | None, seed: int) -> pl.DataFrame:
    """Add ``selected_train`` / ``selected_eval``: up to max_queries per use, half ambiguous where possible.

    Selection is a seeded shuffle within the ambiguous and unambiguous strata, so a small demo sees
    both kinds of question. ``None`` selects everything.
    """
    out = qa
    for use, splits in (("train", ("train", "both")), ("eval", ("eval", "both"))):
        pool = qa.filter(pl.col("split").is_in(splits))
        if max_queries is None:
            chosen = set(pool["query_id"])
        else:
            rng = random.Random(f"{seed}:{use}")
            amb = [r for r in pool.filter(pl.col("is_ambiguous"))["query_id"]]
            una = [r for r in pool.filter(~pl.col("is_ambiguous"))["query_id"]]
            rng.shuffle(amb)
            rng.shuffle(una)
            n_amb = min(len(amb), max(max_queries - len(una), (max_queries + 1) // 2))
            n_una = min(len(una), max_queries - n_amb)
            chosen = set(amb[:n_amb]) | set(una[:n_una])
        out = out.with_columns(pl.col("query_id").is_in(list(chosen)).alias(f"selected_{use}"))
    return out
