"""TRL-ready JSONL exports of an asset: one file per dataset in a folder, and the table that lists them (the double_turn
group's training_exports and the training group's double_turn_dpo_exports; training/exports.py reads that table)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl

from dagster_project.io.writers import write_jsonl_atomic

EXPORTS_SCHEMA = {"export": pl.Utf8, "path": pl.Utf8, "rows": pl.Int64, "written": pl.Boolean, "reason": pl.Utf8}


def write_exports(context: dg.AssetExecutionContext, folder: Path, datasets: dict[str, list[dict[str, Any]]],
                  blocked: str | None) -> pl.DataFrame:
    """Each non-empty dataset as <folder>/<name>.jsonl (atomic). An empty one is not written (a stale file of an
    earlier run is removed) and a warning names it; with ``blocked`` nothing is written. One row per dataset says
    which."""
    rows = []
    for name, records in datasets.items():
        path = folder / f"{name}.jsonl"
        reason = blocked or (None if records else "empty: no kept rows")
        if reason is None:
            write_jsonl_atomic(records, path)
        else:
            path.unlink(missing_ok=True)
            context.log.warning(f"export {path} not written ({reason})")
        rows.append({"export": name, "path": str(path), "rows": len(records), "written": reason is None,
                     "reason": reason})
    return pl.DataFrame(rows, schema=EXPORTS_SCHEMA)
