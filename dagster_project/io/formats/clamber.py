"""CLAMBER (JSONL): fields ``question``, ``context`` (optional), ``require_clarification`` (0/1),
``clarifying_question``, ``category``, ``subclass``. One single-turn dialogue per record; the reference
action is clarify when require_clarification is 1. Lines that hold a JSON *string* which itself contains
the object (as in some published copies) are accepted. A repeated id is quarantined (the first one is kept).

``category`` (CLAMBER's top-level ambiguity class: MC / FD / LA) goes to the turn's `category` column and
``subclass`` to `subtype`; an unambiguous row (require_clarification 0, or subclass "none") has a null subtype,
never the string "none".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dagster_project.io.formats.dialogues import ImportResult, TurnSink, read, text_value
from dagster_project.io.records import MAX_FIELD_CHARS

REQUIRED = ["question", "require_clarification"]


NO_SUBCLASS = ("", "none", "null", "n/a")


def flag_value(value: Any) -> int | None:
    """0/1 from 0, 1, "0", "1", true, false; None otherwise."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and value in (0, 1):
        return value
    if isinstance(value, str) and value.strip().lower() in ("0", "1", "true", "false"):
        return int(value.strip().lower() in ("1", "true"))
    return None


def read_clamber(path: str | Path, dataset: str, limit: int | None = None,
                 max_field_chars: int = MAX_FIELD_CHARS) -> ImportResult:
    """CLAMBER records -> single-turn dialogues ``<dataset>-<id or record number>``."""
    sink = TurnSink(dataset, Path(path).as_posix())
    seen: dict[str, int] = {}
    for rec, obj in read(path, sink, limit, REQUIRED, max_field_chars):
        question = text_value(obj.get("question"))
        need = flag_value(obj.get("require_clarification"))
        if question is None:
            sink.rejected.add_record(rec, "missing or empty 'question'", "question")
            continue
        if need is None:
            sink.rejected.add_record(rec, "'require_clarification' must be 0 or 1, got "
                                          f"{obj.get('require_clarification')!r}", "require_clarification")
            continue
        context = text_value(obj.get("context"))
        user = f"{context}\n\n{question}" if context else question
        ident = text_value(obj.get("id")) or f"{rec.record:06d}"
        if ident in seen:
            sink.rejected.add_record(rec, f"duplicate id {ident!r} (first at record {seen[ident]})", "id")
            continue
        seen[ident] = rec.record
        subclass = text_value(obj.get("subclass"))
        subtype = subclass if need == 1 and (subclass or "").lower() not in NO_SUBCLASS else None
        sink.turn(rec.record, f"{dataset}-{ident}", 1, 1, [{"role": "user", "content": user}],
                  "clarify" if need == 1 else "answer", text_value(obj.get("clarifying_question")),
                  subtype, None, text_value(obj.get("category")))
    return sink.result()
