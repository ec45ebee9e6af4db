"""Clarification dialogues in the benchmark's turn schema: the shared turn sink, the value readers the
dataset formats use, and the ``generic`` format.

Every format yields one row per evaluated turn with ``dialogue_id``, ``turn``, ``messages`` (the dialogue
so far, ending with the user), ``reference_action`` and, for clarify turns, ``reference_question``.
A malformed record never stops an import: it goes to the Quarantine with its file, record number, field
and reason. A file that cannot be used at all (missing, or a required column that no record has, in CSV / TSV
the header, in JSON / JSONL every record) raises InputFileError naming the file and the column.

``generic``  JSONL, JSON, CSV or TSV with columns ``dialogue_id``, ``turn`` (1, 2, ...), ``user`` (the user's
             message at that turn), ``reference_action`` (clarify / answer), and optionally
             ``reference_question``, ``assistant`` (the assistant message before this user message; defaults
             to the previous turn's reference_question), ``subtype``, ``persona``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from dagster_project.io.status import Status
from dagster_project.io.records import (
    MAX_FIELD_CHARS,
    InputFileError,
    Quarantine,
    Record,
    RequiredColumns,
    iter_records,
)

MESSAGE_TYPE = pl.List(pl.Struct({"role": pl.Utf8, "content": pl.Utf8}))
TURN_SCHEMA = {
    "dataset": pl.Utf8, "dialogue_id": pl.Utf8, "query_id": pl.Utf8, "subtype": pl.Utf8, "category": pl.Utf8,
    "persona": pl.Utf8,
    "turn": pl.Int64, "n_turns": pl.Int64, "messages": MESSAGE_TYPE, "user_utterance": pl.Utf8,
    "reference_action": pl.Utf8, "reference_question": pl.Utf8, "status": pl.Utf8, "error": pl.Utf8,
    "source": pl.Utf8, "record": pl.Int64,
}
GENERIC_REQUIRED = ["dialogue_id", "turn", "user", "reference_action"]


@dataclass
class ImportResult:
    """The turns of one dataset file, its quarantined records, and how many records were read."""

    turns: pl.DataFrame
    rejected: Quarantine
    records: int  # records read from the file: each is a turn's record, a rejected one, or merged
    merged: int = 0  # records folded into another record's turn (ClariQ: the further rows of a topic)

    def summary(self) -> dict[str, int]:
        return {"records": self.records, "turns": self.turns.height,
                "dialogues": self.turns["dialogue_id"].n_unique() if self.turns.height else 0,
                "rejected_records": len(self.rejected), "merged_records": self.merged}


@dataclass
class TurnSink:
    """Collects a dataset's turn rows and its quarantine while a format reads the file."""

    dataset: str
    file: str
    turns: list[dict[str, Any]] = field(default_factory=list)
    rejected: Quarantine = field(default_factory=Quarantine)
    records: int = 0  # records read so far (usable or not)
    merged: int = 0  # records folded into another record's turn

    def turn(self, record: int, dialogue_id: str, turn: int, n_turns: int, messages: list[dict[str, str]],
             reference_action: str, reference_question: str | None, subtype: str | None,
             persona: str | None, category: str | None = None) -> None:
        """One evaluated turn; the reference question is kept on clarify turns only. `category` is a dataset's
        own top-level label (CLAMBER's MC / FD / LA, IN3's task domain), null where it has none."""
        self.turns.append({
            "dataset": self.dataset, "dialogue_id": dialogue_id, "query_id": dialogue_id, "subtype": subtype,
            "category": category, "persona": persona, "turn": turn, "n_turns": n_turns, "messages": messages,
            "user_utterance": messages[-1]["content"], "reference_action": reference_action,
            "reference_question": reference_question if reference_action == "clarify" else None,
            "status": Status.OK, "error": None, "source": self.file, "record": record,
        })

    def result(self) -> ImportResult:
        return ImportResult(pl.DataFrame(self.turns, schema=TURN_SCHEMA), self.rejected, self.records, self.merged)


# --------------------------------------------------------------------------- values

def text_value(value: Any) -> str | None:
    """A stripped non-empty string (numbers become their text), else None."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    return value.strip() or None if isinstance(value, str) else None


def int_value(value: Any) -> int | None:
    """An integer from an int, an integral float or a digit string; None otherwise (booleans included)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


# --------------------------------------------------------------------------- records

def _string_encoded(rec: Record) -> Any:
    """The value of a JSON line that holds a JSON *string*, decoded once more; None when it is something else."""
    if not isinstance(rec.data, str):
        return None
    try:
        return json.loads(rec.data)
    except json.JSONDecodeError:
        return None


def _quarantine(sink: TurnSink, rec: Record) -> None:
    if rec.problem == "invalid_json":
        sink.rejected.add_record(rec, f"record {rec.record} is not valid JSON: {rec.detail}")
    elif rec.problem == "not_an_object":
        kind = (rec.detail or "").rsplit(" ", 1)[-1]
        sink.rejected.add_record(rec, f"record {rec.record} is a JSON {kind}, not an object")
    else:
        sink.rejected.add_record(rec, f"{rec.problem}: {rec.detail}")


def _is_table(path: str | Path) -> bool:
    return Path(path).name.lower().removesuffix(".gz").endswith((".csv", ".tsv", ".tab"))


def read(path: str | Path, sink: TurnSink, limit: int | None, required: list[str] | None = None,
         max_field_chars: int = MAX_FIELD_CHARS) -> Iterator[tuple[Record, dict[str, Any]]]:
    """Usable (record, object) pairs, in file order; at most `limit` records are read (bad ones count, in
    `sink.records`). A record that holds no object is quarantined (a JSON string that holds one is accepted), so
    is one with a text value over `max_field_chars` or not valid UTF-8. With `required`, a CSV / TSV file
    without one of those columns, or a JSON / JSONL file where no record has one, is an InputFileError."""
    table = _is_table(path)
    check = bool(required) and table
    columns = RequiredColumns(Path(path).as_posix(), tuple(required or ()))
    for rec in itertools.islice(iter_records(path, max_field_chars=max_field_chars), limit):
        sink.records += 1
        if check and isinstance(rec.data, dict):  # the first row with data shows the header
            check = False
            missing = [c for c in required or [] if c not in rec.data]
            if missing:
                raise InputFileError(path, f"missing required column(s) {missing}; found {list(rec.data)}")
        obj = rec.data if rec.problem is None else (_string_encoded(rec) if rec.problem == "not_an_object" else None)
        if isinstance(obj, dict):
            columns.see(obj)
            yield rec, obj
        else:
            _quarantine(sink, rec)
    if not table:
        columns.check()


# --------------------------------------------------------------------------- the generic format

def _generic_problem(obj: dict[str, Any]) -> tuple[str, str] | None:
    did, turn, user = text_value(obj.get("dialogue_id")), int_value(obj.get("turn")), text_value(obj.get("user"))
    action = (text_value(obj.get("reference_action")) or "").lower()
    if did is None:
        return "dialogue_id", "missing dialogue_id"
    if turn is None or turn < 1:
        return "turn", f"turn must be an integer >= 1, got {obj.get('turn')!r}"
    if user is None:
        return "user", "missing or empty user message"
    if action not in ("clarify", "answer"):
        return "reference_action", f"reference_action must be clarify or answer, got {obj.get('reference_action')!r}"
    return None


def read_generic(path: str | Path, dataset: str, limit: int | None = None,
                 persona_aliases: Mapping[str, str] | None = None, max_field_chars: int = MAX_FIELD_CHARS
                 ) -> ImportResult:
    """Multi-turn dialogues, one record per turn; histories are rebuilt from the earlier turns."""
    sink = TurnSink(dataset, Path(path).as_posix())
    aliases = persona_aliases or {}
    dialogues: dict[str, dict[int, tuple[Record, dict[str, Any]]]] = {}
    for rec, obj in read(path, sink, limit, GENERIC_REQUIRED, max_field_chars):
        bad = _generic_problem(obj)
        if bad:
            sink.rejected.add_record(rec, bad[1], bad[0])
            continue
        did, turn = text_value(obj["dialogue_id"]), int_value(obj["turn"])
        turns = dialogues.setdefault(did, {})
        if turn in turns:
            sink.rejected.add_record(rec, f"dialogue {did} has turn {turn} twice (first at record "
                                          f"{turns[turn][0].record})", "turn")
            continue
        turns[turn] = (rec, obj | {"reference_action": text_value(obj["reference_action"]).lower()})
    for did, turns in dialogues.items():
        _rebuild(sink, did, turns, aliases)
    return sink.result()


def _rebuild(sink: TurnSink, did: str, turns: dict[int, tuple[Record, dict[str, Any]]],
             aliases: Mapping[str, str]) -> None:
    """One dialogue's turns with their histories; from the first gap or missing assistant message on,
    the remaining turns are quarantined."""
    history: list[dict[str, str]] = []
    ordered = sorted(turns)

    def reject_rest(pos: int, field_name: str, reason: str) -> None:
        for later in ordered[pos - 1:]:
            sink.rejected.add_record(turns[later][0], reason, field_name)

    for pos, t in enumerate(ordered, start=1):
        rec, obj = turns[t]
        if t != pos:
            return reject_rest(pos, "turn", f"dialogue {did}: turn {pos} is missing or was rejected, so turn {t} "
                                            f"cannot be rebuilt")
        if t > 1:
            prev = turns[t - 1][1]
            assistant = text_value(obj.get("assistant")) or text_value(prev.get("reference_question"))
            if assistant is None:
                return reject_rest(pos, "assistant", f"dialogue {did}: no assistant message before turn {t} (give "
                                                     f"'assistant' or the previous turn's reference_question)")
            history.append({"role": "assistant", "content": assistant})
        history.append({"role": "user", "content": text_value(obj["user"])})
        persona = text_value(obj.get("persona"))
        persona = aliases.get(persona.lower(), persona) if persona else None
        sink.turn(rec.record, did, t, len(ordered), list(history), obj["reference_action"],
                  text_value(obj.get("reference_question")), text_value(obj.get("subtype")), persona)
