"""Building blocks of the groups' headline tables (defs/<group>/group.py): JSON-safe numbers, the nesting DVC
metrics use, and column picks for the report index. Read from built Parquet only; never runs anything."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import polars as pl

from dagster_project.io.status import Status
from dagster_project.lib.warehouse import read_asset


def num(v: object) -> float | int | None:
    """A JSON-safe number: NaN / inf become null (JSON has neither), floats rounded to 4 places."""
    if v is None or isinstance(v, bool):
        return None if v is None else int(v)
    if isinstance(v, float):
        return None if not math.isfinite(v) else round(v, 4)
    return v if isinstance(v, int) else None


def nest(rows: list[dict], keys: list[str], values: list[str]) -> dict:
    """{k1: {k2: {value: number}}}: DVC flattens the nesting into column names like `smollm2.base.accuracy`."""
    out: dict = {}
    for r in rows:
        node = out
        for k in keys:
            node = node.setdefault(str(r[k]), {})
        node.update({v: num(r.get(v)) for v in values if v in r})
    return out


def pick(t: pl.DataFrame | None, keys: list[str], metric: Callable[[str], bool],
         only: tuple[str, str] | None = None) -> pl.DataFrame | None:
    """The key columns that exist, then the metric columns; with `only` = (column, value), those rows only."""
    if t is None or t.is_empty():
        return None
    if only is not None and only[0] in t.columns:
        t = t.filter(pl.col(only[0]) == only[1])
    return t.select([c for c in keys if c in t.columns] + [c for c in t.columns if c not in keys and metric(c)])


def pass_rate(t: pl.DataFrame) -> float | None:
    """Share of rows kept (a filter's table), else share with status ok (an LLM step's table), else None."""
    if "kept" in t.columns:
        return t["kept"].cast(pl.Float64).mean()
    if "status" in t.columns:
        return (t["status"] == Status.OK.value).cast(pl.Float64).mean()
    return None


def stage_rows(base: str | Path, group: str, names: tuple[str, ...]) -> pl.DataFrame | None:
    """Rows and pass rate of the named assets of a group that exist (the ClariLM stages' headline)."""
    rows = []
    for name in names:
        t = read_asset(base, group, name)
        if t is not None:
            rows.append({"asset": name, "rows": t.height, "pass_rate": pass_rate(t)})
    return pl.DataFrame(rows, schema={"asset": pl.Utf8, "rows": pl.Int64, "pass_rate": pl.Float64}) if rows else None
