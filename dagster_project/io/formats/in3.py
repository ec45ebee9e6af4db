"""IN3 (Intention-in-Interaction, JSONL): fields ``task``, ``vague`` (true / false), ``category`` (the task's
domain), ``thought``, ``missing_details`` (a list of ``{description, importance ("1"-"3"), inquiry, options}``).

One single-turn dialogue per record; the reference action is clarify when ``vague`` is true. The reference
question is every missing detail's ``inquiry``, most important first (IN3 lists the clarification points a
good question covers; ClariLM's token-F1 measures their coverage). ``category`` goes to the turn's `category`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dagster_project.io.formats.clamber import flag_value
from dagster_project.io.formats.dialogues import ImportResult, TurnSink, int_value, read, text_value
from dagster_project.io.records import MAX_FIELD_CHARS

REQUIRED = ["task", "vague"]


def inquiries(details: Any) -> list[str] | None:
    """The inquiries of a missing_details list, by importance (highest first, file order within a level);
    None when the value is not a list of objects."""
    if details is None:
        return []
    if not isinstance(details, list) or not all(isinstance(d, dict) for d in details):
        return None
    ranked = [(-(int_value(d.get("importance")) or 0), i, text_value(d.get("inquiry"))) for i, d in enumerate(details)]
    return [q for _, _, q in sorted(ranked) if q]


def read_in3(path: str | Path, dataset: str, limit: int | None = None,
             max_field_chars: int = MAX_FIELD_CHARS) -> ImportResult:
    """IN3 records -> single-turn dialogues ``<dataset>-<record number>``; malformed records are quarantined."""
    sink = TurnSink(dataset, Path(path).as_posix())
    for rec, obj in read(path, sink, limit, REQUIRED, max_field_chars):
        task = text_value(obj.get("task"))
        vague = flag_value(obj.get("vague"))
        asks = inquiries(obj.get("missing_details"))
        if task is None:
            sink.rejected.add_record(rec, "missing or empty 'task'", "task")
        elif vague is None:
            sink.rejected.add_record(rec, f"'vague' must be true or false, got {obj.get('vague')!r}", "vague")
        elif asks is None:
            sink.rejected.add_record(rec, "'missing_details' must be a list of objects", "missing_details")
        else:
            sink.turn(rec.record, f"{dataset}-{rec.record:06d}", 1, 1, [{"role": "user", "content": task}],
                      "clarify" if vague else "answer", " ".join(asks) or None, None, None,
                      text_value(obj.get("category")))
    return sink.result()
