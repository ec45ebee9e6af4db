"""ClariQ (TSV): columns ``topic_id``, ``initial_request``, ``clarification_need`` (1-4), and optionally
``question`` (a clarifying question) / ``facet_desc``. The rows of one topic become one single-turn
dialogue; its reference action is clarify when clarification_need >= ``clarify_from``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dagster_project.io.formats.dialogues import ImportResult, TurnSink, int_value, read, text_value
from dagster_project.io.records import MAX_FIELD_CHARS

REQUIRED = ["topic_id", "initial_request", "clarification_need"]


def read_clariq(path: str | Path, dataset: str, limit: int | None = None, clarify_from: int = 2,
                max_field_chars: int = MAX_FIELD_CHARS) -> ImportResult:
    """ClariQ rows -> one dialogue ``<dataset>-<topic_id>`` per topic (its first row's request and need; the
    topic's further rows are counted as merged)."""
    sink = TurnSink(dataset, Path(path).as_posix())
    topics: dict[str, dict[str, Any]] = {}
    for rec, row in read(path, sink, limit, REQUIRED, max_field_chars):
        topic, request = text_value(row.get("topic_id")), text_value(row.get("initial_request"))
        need = int_value(row.get("clarification_need"))
        if topic is None:
            sink.rejected.add_record(rec, "missing topic_id", "topic_id")
            continue
        if request is None:
            sink.rejected.add_record(rec, "missing or empty initial_request", "initial_request")
            continue
        if need is None or not 1 <= need <= 4:
            sink.rejected.add_record(rec, "clarification_need must be an integer 1-4, got "
                                          f"{row.get('clarification_need')!r}", "clarification_need")
            continue
        t = topics.setdefault(topic, {"record": rec.record, "request": request, "need": need, "question": None})
        if (request, need) != (t["request"], t["need"]):
            sink.rejected.add_record(rec, f"topic {topic} already has a different request / need "
                                          f"(record {t['record']})", "initial_request")
            continue
        if t["record"] != rec.record:
            sink.merged += 1
        t["question"] = t["question"] or text_value(row.get("question"))
    for topic, t in topics.items():
        action = "clarify" if t["need"] >= clarify_from else "answer"
        sink.turn(t["record"], f"{dataset}-{topic}", 1, 1, [{"role": "user", "content": t["request"]}], action,
                  t["question"], f"clarification_need_{t['need']}", None)
    return sink.result()
