"""ClariLM's question-group inputs: the persona list and user-provided seed questions (read here, in io/, so
core/clarilm stays free of file I/O). Bad records are errors naming file, record, field and params key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from dagster_project.io.records import InputFileError, iter_records


def _text(rec_data: dict[str, Any], name: str, file: str, record: int, key: str) -> str:
    value = rec_data.get(name)
    if not isinstance(value, str) or not value.strip():
        raise InputFileError(file, "must be a non-empty string", record=record, field=name, key=key)
    return value.strip()


def load_personas(path: str | Path) -> pl.DataFrame:
    """JSONL {persona_id, description}; a bad record is an error naming file, record and field."""
    key = "questions.personas_path"
    if not Path(path).is_file():
        raise InputFileError(path, "persona file not found", key=key)
    rows = []
    for rec in iter_records(path):
        if rec.problem:
            raise InputFileError(rec.file, f"{rec.problem}: {rec.detail}", record=rec.record, key=key)
        rows.append({"persona_id": _text(rec.data, "persona_id", rec.file, rec.record, key),
                     "description": _text(rec.data, "description", rec.file, rec.record, key)})
    df = pl.DataFrame(rows, schema={"persona_id": pl.Utf8, "description": pl.Utf8})
    dups = df.filter(pl.col("persona_id").is_duplicated())["persona_id"].unique().to_list()
    if dups:
        raise InputFileError(Path(path).as_posix(), f"duplicate persona_id {sorted(dups)}", key=key)
    return df


def load_seed_questions(paths: list[str]) -> list[str]:
    """User-provided seed questions for the demonstrations: .txt (one per line) or records with a
    "question" field (.jsonl, .json, .csv, ...)."""
    key = "questions.seed_files"
    out = []
    for p in map(Path, paths):
        if not p.is_file():
            raise InputFileError(p, "seed question file not found", key=key)
        if p.suffix.lower() != ".txt":
            for rec in iter_records(p):
                if rec.problem:
                    raise InputFileError(rec.file, f"{rec.problem}: {rec.detail}", record=rec.record, key=key)
                out.append(_text(rec.data, "question", rec.file, rec.record, key))
            continue
        out += [line.strip() for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
    return out
