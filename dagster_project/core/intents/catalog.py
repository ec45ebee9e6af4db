"""The intent catalogue (name, description, examples) and how intent names and texts compare."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any

import polars as pl

from dagster_project.io.formats.intents import problem_reason, split_list
from dagster_project.io.records import InputFileError, Record

OOD_TARGET = "out of domain"  # what the assistant says (and is trained to say) for an out-of-domain message
SPLITS = {"train": "train", "training": "train", "val": "val", "valid": "val", "validation": "val", "dev": "val",
          "test": "test"}
CATALOG_SCHEMA = {"intent": pl.Utf8, "description": pl.Utf8, "examples": pl.List(pl.Utf8), "record": pl.Int64,
                  "kept": pl.Boolean, "reject_reason": pl.Utf8}


def bad_encoding(text: str) -> bool:
    """U+FFFD (undecodable bytes) or control characters other than tab / newline."""
    return "\ufffd" in text or any(unicodedata.category(c) == "Cc" and c not in "\t\n\r" for c in text)


def normalize_text(text: str) -> str:
    """Case-folded, whitespace-collapsed text: the key for exact-duplicate detection."""
    return " ".join(text.casefold().split())


def name_key(name: str) -> str:
    """Intent names compare case-, space-, underscore- and hyphen-insensitively."""
    return " ".join(re.sub(r"[_\-]+", " ", name.casefold()).split())


def string_enum(values: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """JSON schema of a string that must be one of `values` (written out: a one-value enum stays an enum)."""
    return {"type": "string", "enum": list(values)}


def known_intent(name: Any, names: list[str]) -> str | None:
    """The catalogue spelling of `name`, or None when it is not one of `names`."""
    if not isinstance(name, str):
        return None
    return {name_key(n): n for n in names}.get(name_key(name))


@dataclass(frozen=True)
class Intent:
    name: str
    description: str
    examples: tuple[str, ...]


@dataclass(frozen=True)
class Catalog:
    intents: tuple[Intent, ...]

    @property
    def names(self) -> list[str]:
        return [i.name for i in self.intents]

    def get(self, name: str) -> Intent:
        for i in self.intents:
            if i.name == name:
                return i
        raise KeyError(name)

    def render(self, names: list[str] | tuple[str, ...] | None = None, examples_per_intent: int = 2) -> str:
        """One line per intent: `- name: description; e.g. "..." | "..."`."""
        lines = []
        for i in self.intents:
            if names is not None and i.name not in names:
                continue
            line = f"- {i.name}: {i.description}" if i.description else f"- {i.name}"
            ex = i.examples[:examples_per_intent]
            if ex:
                line += "; e.g. " + " | ".join(f'"{e}"' for e in ex)
            lines.append(line)
        return "\n".join(lines)

    @staticmethod
    def from_frame(df: pl.DataFrame) -> Catalog:
        """The kept rows of the `intent_catalog` table."""
        kept = df.filter(pl.col("kept"))
        return Catalog(tuple(Intent(r["intent"], r["description"] or "", tuple(r["examples"] or []))
                             for r in kept.iter_rows(named=True)))


def _catalog_problem(name: Any, desc: Any, ex: Any, ood_label: str, seen: dict[str, int]) -> str | None:
    if not isinstance(name, str) or not name.strip():
        return "missing field 'name'"
    if "\n" in name or len(name) > 80 or bad_encoding(name):
        return "field 'name' must be one line of at most 80 characters"
    if name_key(name) in (name_key(ood_label), name_key(OOD_TARGET)):
        return f"intent name {name!r} is reserved for out-of-domain"
    if ex is not None and not (isinstance(ex, list) and all(isinstance(e, str) for e in ex)):
        return "field 'examples' must be a list of strings or a '|'-separated string"
    if desc is not None and not isinstance(desc, str):
        return "field 'description' must be a string"
    if name_key(name) in seen:
        return f"duplicate intent name (first at record {seen[name_key(name)]})"
    return None


def validate_catalog(records: list[Record], source: str, ood_label: str) -> pl.DataFrame:
    """One row per catalogue record: intent, description, examples, kept, reject_reason (never dropped).

    Needs `name` (or `intent`); `examples` is a list of strings or one string separated by `|`. Raises
    InputFileError naming the file when no intent survives.
    """
    rows: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for rec in records:
        if rec.problem:
            rows.append({"intent": None, "description": None, "examples": [], "record": rec.record, "kept": False,
                         "reject_reason": problem_reason(rec)})
            continue
        r = rec.data
        name, desc, ex = r.get("name", r.get("intent")), r.get("description"), split_list(r.get("examples"))
        row = {"intent": name if isinstance(name, str) else None,
               "description": desc if isinstance(desc, str) else None, "examples": [], "record": rec.record,
               "kept": False, "reject_reason": _catalog_problem(name, desc, ex, ood_label, seen)}
        if row["reject_reason"] is None:
            row.update(intent=name.strip(), description=(desc or "").strip(), kept=True,
                       examples=[" ".join(e.split()) for e in (ex or []) if e.strip()])
            seen[name_key(name)] = rec.record
        rows.append(row)
    out = pl.DataFrame(rows, schema=CATALOG_SCHEMA).sort("record")
    if not out["kept"].any():
        reasons = "; ".join(f"record {r['record']}: {r['reject_reason']}" for r in out.head(5).to_dicts())
        raise InputFileError(source, f"no usable intent in the catalogue ({reasons or 'file is empty'})",
                             key="intents.catalog")
    return out.with_columns(n_examples=pl.col("examples").list.len(), source=pl.lit(source))
