"""Intent datasets on top of io.records: the catalogue (name, description, examples), tagged utterances (text,
intent, optional split), few-shot dialogues ({"messages": [...]}) and ambiguous queries the user already has.

Any file type io.records reads (CSV / TSV / JSONL / JSON / YAML / Parquet). Every reader returns all records
of the file in order, unparseable ones included (with `problem` set): the intent steps keep those as refused
rows with `problem_reason`, so nothing is dropped silently.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from dagster_project.io.records import MAX_FIELD_CHARS, InputFileError, Record, iter_records


def problem_reason(rec: Record) -> str:
    """Why a record could not be parsed, in the words the intent tables use."""
    if rec.problem == "invalid_json":
        return f"malformed JSON: {rec.detail}"
    if rec.problem == "not_utf8":
        return f"bad encoding (undecodable bytes: {rec.detail})"
    if rec.problem == "oversized_field":
        return f"field {rec.field!r} too long: {rec.detail}"
    return rec.detail or rec.problem or "unreadable record"


def as_text(value: Any) -> str | None:
    """A field as text: None for absent / null / NaN, other scalars as their string."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value if isinstance(value, str) else str(value)


def split_list(value: Any) -> Any:
    """A list field may also be one `|`-separated string ("a | b" -> ["a", "b"]); other values are returned as is."""
    if isinstance(value, str):
        return [v.strip() for v in value.split("|") if v.strip()]
    return value


def read_intent_records(path: str | Path, required: tuple[str | tuple[str, ...], ...] = (), key: str | None = None,
                        max_field_chars: int = MAX_FIELD_CHARS) -> list[Record]:
    """Every record of an intent dataset file. Raises InputFileError naming the file, the field (a tuple: any one
    of those names) and the params key when the file cannot be read, or when a required field is absent from
    every parsed record."""
    records = list(iter_records(path, key=key, max_field_chars=max_field_chars))
    parsed = [r.data for r in records if r.problem is None]
    for need in required:
        names = (need,) if isinstance(need, str) else need
        if parsed and not any(n in d for d in parsed for n in names):
            found = sorted({k for d in parsed for k in d})
            label = " or ".join(repr(n) for n in names)
            raise InputFileError(Path(path).as_posix(), f"no field {label} in any record (fields found: {found})",
                                 key=key)
    return records


def read_catalog(path: str | Path) -> list[Record]:
    """Intent catalogue: `name` (or `intent`), optional `description`, optional `examples` (list or `|` string)."""
    return read_intent_records(path, (("name", "intent"),), key="intents.catalog")


def read_utterances(path: str | Path) -> list[Record]:
    """Tagged utterances: `text`, `intent`, optional `split` (train / val / test and their aliases)."""
    return read_intent_records(path, ("text", "intent"), key="intents.dataset")


def read_few_shot(path: str | Path) -> list[Record]:
    """Demo dialogues for the assistant prompt: `messages` = [{role: user|assistant, content}, ...]."""
    return read_intent_records(path, ("messages",), key="intents.few_shot")


def read_ambiguous(path: str | Path) -> list[Record]:
    """Ambiguous queries the user already has: ambiguous_query, unambiguous_query, true_intent,
    candidate_intents (list or `|` string), optional split."""
    return read_intent_records(path, ("ambiguous_query", "unambiguous_query", "true_intent", "candidate_intents"),
                               key="intents.ambiguous_dataset")
