"""Public clarification datasets (params.yaml evaluation.external) -> the benchmark's dialogue/turn schema.

The formats live in io/formats/ (clamber, clariq, in3, and the generic dialogue format); every method and
metric runs unchanged on their turns. Malformed records go to the quarantine; a file that cannot be used
at all raises InputFileError naming the file and the params key.
"""

from __future__ import annotations

from pathlib import Path

from dagster_project.core.shared.taxonomy import PERSONAS
from dagster_project.io.formats.clamber import read_clamber
from dagster_project.io.formats.clariq import read_clariq
from dagster_project.io.formats.dialogues import TURN_SCHEMA, ImportResult, read_generic
from dagster_project.io.formats.in3 import read_in3
from dagster_project.io.records import MAX_FIELD_CHARS, InputFileError

__all__ = ["FORMATS", "TURN_SCHEMA", "ImportResult", "import_dataset"]

FORMATS = ("clamber", "clariq", "in3", "generic")
PERSONA_ALIASES = {k: p.key for p in PERSONAS for k in (p.key, p.name.lower(), p.name.lower().replace("-", "_"))}


def import_dataset(dataset: str, fmt: str, path: str | Path, limit: int | None = None,
                   clariq_clarify_from: int = 2, max_field_chars: int = MAX_FIELD_CHARS,
                   key: str | None = None) -> ImportResult:
    """Read one external dataset; raises InputFileError (naming the params `key`) only when the file as a whole
    is unusable. Records with a text value over `max_field_chars`, invalid UTF-8 or a repeated id are quarantined."""
    key = key or f"evaluation.external.{dataset}"
    if fmt not in FORMATS:
        raise InputFileError(path, f"unknown external format {fmt!r}; known: {list(FORMATS)}", key=f"{key}.format")
    if not Path(path).is_file():
        raise InputFileError(path, "file not found", key=f"{key}.path")
    try:
        if fmt == "clamber":
            return read_clamber(path, dataset, limit, max_field_chars)
        if fmt == "clariq":
            return read_clariq(path, dataset, limit, clariq_clarify_from, max_field_chars)
        if fmt == "in3":
            return read_in3(path, dataset, limit, max_field_chars)
        return read_generic(path, dataset, limit, PERSONA_ALIASES, max_field_chars)
    except InputFileError as err:
        raise err.with_key(f"{key}.path") from None
