"""Importers: public clarification datasets -> the benchmark's dialogue/turn schema (bring your own files).

Every method and metric runs unchanged on the result: one row per evaluated turn with ``dialogue_id``,
``turn``, ``messages`` (the dialogue so far, ending with the user), ``reference_action`` and, for
clarify turns, ``reference_question``. Malformed records never stop an import: they go to the
rejected table with the file, record number, field and reason. A missing file or a file without a
required column is an error that names both.

Formats
-------
``clamber``  CLAMBER JSONL. Fields ``question``, ``context`` (optional), ``require_clarification``
             (0/1), ``clarifying_question``, ``category``, ``subclass``. Single turn; reference action
             clarify when require_clarification is 1. Lines that hold a JSON *string* which itself
             contains the object (as in some published copies) are accepted.
``clariq``   ClariQ TSV. Columns ``topic_id``, ``initial_request``, ``clarification_need`` (1-4), and
             optionally ``question`` (a clarifying question) / ``facet_desc``. Rows of one topic become
             one single-turn dialogue; clarify when clarification_need >= ``clariq_clarify_from``.
``generic``  JSONL, CSV or TSV (by extension) with columns ``dialogue_id``, ``turn`` (1, 2, ...),
             ``user`` (the user's message at that turn), ``reference_action`` (clarify / answer), and
             optionally ``reference_question``, ``assistant`` (the assistant message before this user
             message; defaults to the previous turn's reference_question), ``subtype``, ``persona``.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from dagster_project.core.shared.taxonomy import PERSONAS

MESSAGE_TYPE = pl.List(pl.Struct({"role": pl.Utf8, "content": pl.Utf8}))
TURN_SCHEMA = {
    "dataset": pl.Utf8, "dialogue_id": pl.Utf8, "query_id": pl.Utf8, "subtype": pl.Utf8, "persona": pl.Utf8,
    "turn": pl.Int64, "n_turns": pl.Int64, "messages": MESSAGE_TYPE, "user_utterance": pl.Utf8,
    "reference_action": pl.Utf8, "reference_question": pl.Utf8, "status": pl.Utf8, "error": pl.Utf8,
    "source": pl.Utf8, "record": pl.Int64,
}
REJECTED_SCHEMA = {"dataset": pl.Utf8, "file": pl.Utf8, "record": pl.Int64, "field": pl.Utf8,
                   "reason": pl.Utf8, "raw": pl.Utf8}
FORMATS = ("clamber", "clariq", "generic")
_PERSONA_ALIASES = {k: p.key for p in PERSONAS for k in (p.key, p.name.lower(), p.name.lower().replace("-", "_"))}


class ExternalDataError(ValueError):
    """The file as a whole cannot be read (missing, or a required column is absent)."""


@dataclass
class ImportResult:
    turns: pl.DataFrame
    rejected: pl.DataFrame
    records: int  # records read from the file (each is either in turns' sources or in rejected)

    def summary(self) -> dict[str, int]:
        return {"records": self.records, "turns": self.turns.height,
                "dialogues": self.turns["dialogue_id"].n_unique() if self.turns.height else 0,
                "rejected_records": self.rejected.height}


class _Sink:
    def __init__(self, dataset: str, path: Path):
        self.dataset, self.file = dataset, str(path)
        self.turns: list[dict[str, Any]] = []
        self.rejected: list[dict[str, Any]] = []
        self.records = 0

    def reject(self, record: int, field: str | None, reason: str, raw: Any) -> None:
        text = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False, default=str)
        self.rejected.append({"dataset": self.dataset, "file": self.file, "record": record, "field": field,
                              "reason": reason, "raw": text[:2000]})

    def turn(self, record: int, dialogue_id: str, turn: int, n_turns: int, messages: list[dict[str, str]],
             reference_action: str, reference_question: str | None, subtype: str | None,
             persona: str | None) -> None:
        self.turns.append({
            "dataset": self.dataset, "dialogue_id": dialogue_id, "query_id": dialogue_id, "subtype": subtype,
            "persona": persona, "turn": turn, "n_turns": n_turns, "messages": messages,
            "user_utterance": messages[-1]["content"], "reference_action": reference_action,
            "reference_question": reference_question if reference_action == "clarify" else None,
            "status": "ok", "error": None, "source": self.file, "record": record,
        })

    def result(self, records: int) -> ImportResult:
        return ImportResult(pl.DataFrame(self.turns, schema=TURN_SCHEMA),
                            pl.DataFrame(self.rejected, schema=REJECTED_SCHEMA), records)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    return value.strip() or None if isinstance(value, str) else None


def _flag(value: Any) -> int | None:
    """0/1 from 0, 1, "0", "1", true, false; None otherwise."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and value in (0, 1):
        return value
    if isinstance(value, str) and value.strip().lower() in ("0", "1", "true", "false"):
        return int(value.strip().lower() in ("1", "true"))
    return None


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def _check_file(path: Path) -> None:
    if not path.exists():
        raise ExternalDataError(f"{path}: file not found (params.yaml evaluation.external ... path)")
    if not path.is_file():
        raise ExternalDataError(f"{path}: not a file")


def _json_lines(path: Path, sink: _Sink, limit: int | None):
    """(record number, object) for every non-empty line that holds a JSON object; the rest are rejected."""
    n = 0
    with path.open(encoding="utf-8", errors="replace") as fh:
        for line_no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            if limit is not None and n >= limit:
                break
            n += 1
            try:
                obj = json.loads(line)
                if isinstance(obj, str):  # a JSON string that itself holds the object
                    obj = json.loads(obj)
            except json.JSONDecodeError as err:
                sink.reject(line_no, None, f"line {line_no} is not valid JSON: {err.msg}", line.strip())
                continue
            if not isinstance(obj, dict):
                sink.reject(line_no, None, f"line {line_no} is a JSON {type(obj).__name__}, not an object",
                            line.strip())
                continue
            yield line_no, obj
    sink.records = n


def read_clamber(path: str | Path, dataset: str, limit: int | None = None) -> ImportResult:
    path = Path(path)
    _check_file(path)
    sink = _Sink(dataset, path)
    for rec, obj in _json_lines(path, sink, limit):
        question = _text(obj.get("question"))
        need = _flag(obj.get("require_clarification"))
        if question is None:
            sink.reject(rec, "question", "missing or empty 'question'", obj)
            continue
        if need is None:
            sink.reject(rec, "require_clarification",
                        f"'require_clarification' must be 0 or 1, got {obj.get('require_clarification')!r}", obj)
            continue
        context = _text(obj.get("context"))
        user = f"{context}\n\n{question}" if context else question
        action = "clarify" if need == 1 else "answer"
        ident = _text(obj.get("id")) or f"{rec:06d}"
        sink.turn(rec, f"{dataset}-{ident}", 1, 1, [{"role": "user", "content": user}], action,
                  _text(obj.get("clarifying_question")), _text(obj.get("subclass")) or _text(obj.get("category")),
                  None)
    return sink.result(sink.records)


def _read_table(path: Path, required: list[str]) -> list[dict[str, Any]]:
    """CSV/TSV rows as dicts of strings; a missing required column is a file-level error."""
    delimiter = "\t" if path.suffix.lower() in (".tsv", ".tab") else ","
    with path.open(encoding="utf-8", errors="replace", newline="") as fh:
        reader = csv.DictReader(fh, delimiter=delimiter)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise ExternalDataError(f"{path}: missing required column(s) {missing}; found {reader.fieldnames}")
        return list(reader)


def read_clariq(path: str | Path, dataset: str, limit: int | None = None, clarify_from: int = 2) -> ImportResult:
    path = Path(path)
    _check_file(path)
    sink = _Sink(dataset, path)
    rows = _read_table(path, ["topic_id", "initial_request", "clarification_need"])
    if limit is not None:
        rows = rows[:limit]
    topics: dict[str, dict[str, Any]] = {}
    for rec, row in enumerate(rows, start=2):  # record = line number (line 1 is the header)
        topic, request, need = _text(row.get("topic_id")), _text(row.get("initial_request")), _int(
            row.get("clarification_need"))
        if topic is None:
            sink.reject(rec, "topic_id", "missing topic_id", row)
            continue
        if request is None:
            sink.reject(rec, "initial_request", "missing or empty initial_request", row)
            continue
        if need is None or not 1 <= need <= 4:
            sink.reject(rec, "clarification_need",
                        f"clarification_need must be an integer 1-4, got {row.get('clarification_need')!r}", row)
            continue
        t = topics.setdefault(topic, {"record": rec, "request": request, "need": need, "question": None})
        if (request, need) != (t["request"], t["need"]):
            sink.reject(rec, "initial_request", f"topic {topic} already has a different request / need "
                        f"(line {t['record']})", row)
            continue
        t["question"] = t["question"] or _text(row.get("question"))
    for topic, t in topics.items():
        action = "clarify" if t["need"] >= clarify_from else "answer"
        sink.turn(t["record"], f"{dataset}-{topic}", 1, 1, [{"role": "user", "content": t["request"]}], action,
                  t["question"], f"clarification_need_{t['need']}", None)
    return sink.result(len(rows))


GENERIC_REQUIRED = ["dialogue_id", "turn", "user", "reference_action"]


def read_generic(path: str | Path, dataset: str, limit: int | None = None) -> ImportResult:
    path = Path(path)
    _check_file(path)
    sink = _Sink(dataset, path)
    if path.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        records = list(_json_lines(path, sink, limit))
        n_records = sink.records
    else:
        table = _read_table(path, GENERIC_REQUIRED)
        if limit is not None:
            table = table[:limit]
        records = list(enumerate(table, start=2))
        n_records = len(records)
    dialogues: dict[str, dict[int, tuple[int, dict[str, Any]]]] = {}
    for rec, obj in records:
        did, turn, user = _text(obj.get("dialogue_id")), _int(obj.get("turn")), _text(obj.get("user"))
        action = (_text(obj.get("reference_action")) or "").lower()
        bad = ("dialogue_id", "missing dialogue_id") if did is None else \
            ("turn", f"turn must be an integer >= 1, got {obj.get('turn')!r}") if turn is None or turn < 1 else \
            ("user", "missing or empty user message") if user is None else \
            ("reference_action", f"reference_action must be clarify or answer, got {obj.get('reference_action')!r}") \
            if action not in ("clarify", "answer") else None
        if bad:
            sink.reject(rec, bad[0], bad[1], obj)
            continue
        turns = dialogues.setdefault(did, {})
        if turn in turns:
            sink.reject(rec, "turn", f"dialogue {did} has turn {turn} twice (first at record {turns[turn][0]})", obj)
            continue
        turns[turn] = (rec, obj | {"reference_action": action})
    for did, turns in dialogues.items():
        history: list[dict[str, str]] = []
        ordered = sorted(turns)
        for pos, t in enumerate(ordered, start=1):
            rec, obj = turns[t]
            if t != pos:
                reason = f"dialogue {did}: turn {pos} is missing or was rejected, so turn {t} cannot be rebuilt"
                for later in ordered[pos - 1:]:
                    sink.reject(turns[later][0], "turn", reason, turns[later][1])
                break
            if t > 1:
                prev = turns[t - 1][1]
                assistant = _text(obj.get("assistant")) or _text(prev.get("reference_question"))
                if assistant is None:
                    reason = f"dialogue {did}: no assistant message before turn {t} (give 'assistant' or the " \
                             f"previous turn's reference_question)"
                    for later in ordered[pos - 1:]:
                        sink.reject(turns[later][0], "assistant", reason, turns[later][1])
                    break
                history.append({"role": "assistant", "content": assistant})
            history.append({"role": "user", "content": _text(obj["user"])})
            persona = _text(obj.get("persona"))
            persona = _PERSONA_ALIASES.get(persona.lower(), persona) if persona else None
            sink.turn(rec, did, t, len(ordered), list(history), obj["reference_action"],
                      _text(obj.get("reference_question")), _text(obj.get("subtype")), persona)
    return sink.result(n_records)


def import_dataset(dataset: str, fmt: str, path: str | Path, limit: int | None = None,
                   clariq_clarify_from: int = 2) -> ImportResult:
    """Read one external dataset; raises ExternalDataError only when the file as a whole is unusable."""
    if fmt == "clamber":
        return read_clamber(path, dataset, limit)
    if fmt == "clariq":
        return read_clariq(path, dataset, limit, clariq_clarify_from)
    if fmt == "generic":
        return read_generic(path, dataset, limit)
    raise ExternalDataError(f"unknown external format {fmt!r}; known: {list(FORMATS)}")
