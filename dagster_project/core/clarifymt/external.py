"""Public clarification datasets (params.yaml evaluation.external) -> the benchmark's dialogue/turn schema.

The formats live in io/formats/ (clamber, clariq, in3, and the generic dialogue format); every method and
metric runs unchanged on their turns. Malformed records go to the quarantine; a file that cannot be used
at all raises InputFileError naming the file and the params key.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from dagster_project.core.shared.taxonomy import PERSONAS
from dagster_project.io.formats.clamber import read_clamber
from dagster_project.io.formats.clariq import read_clariq
from dagster_project.io.formats.dialogues import TURN_SCHEMA, ImportResult, read_generic
from dagster_project.io.formats.in3 import read_in3
from dagster_project.io.records import MAX_FIELD_CHARS, InputFileError

__all__ = ["FORMATS", "TURN_SCHEMA", "ImportResult", "held_out_turns", "import_dataset"]

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


def held_out_turns(held_out: pl.DataFrame, dataset: str) -> pl.DataFrame:
    """ClariLM's held-out questions (annotations/held_out_set) as one-turn dialogues with CoTAP's reference action;
    a question whose annotation failed keeps its row with status no_reference (counted, never evaluated)."""
    ok = pl.col("reference_action").is_not_null()
    return held_out.with_row_index("record").select(
        pl.lit(dataset).alias("dataset"), pl.col("question_id").alias("dialogue_id"), pl.col("question_id").alias("query_id"),
        pl.lit(None, pl.Utf8).alias("subtype"), pl.col("question_source").alias("category"),
        pl.lit(None, pl.Utf8).alias("persona"), pl.lit(1, pl.Int64).alias("turn"), pl.lit(1, pl.Int64).alias("n_turns"),
        pl.col("question").map_elements(lambda q: [{"role": "user", "content": q}], return_dtype=TURN_SCHEMA["messages"])
        .alias("messages"),
        pl.col("question").alias("user_utterance"), "reference_action", "reference_question",
        pl.when(ok).then(pl.lit("ok")).otherwise(pl.lit("no_reference")).alias("status"),
        pl.when(ok).then(pl.lit(None, pl.Utf8)).otherwise(pl.format("CoTAP annotation status {}", pl.col("status")))
        .alias("error"),
        pl.lit("annotations.held_out_set").alias("source"), pl.col("record").cast(pl.Int64),
    ).cast(TURN_SCHEMA)
