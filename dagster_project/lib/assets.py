"""Asset building blocks every defs/<group>/ uses: one decorator per group, upstream inputs by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dagster as dg
import polars as pl


def group_asset(group: str) -> Callable[..., Any]:
    """`@asset(...)` for one group: key prefix and group name are the group, kind polars."""

    def asset(fn: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
        kwargs = {"key_prefix": group, "group_name": group, "kinds": {"polars"}} | kwargs
        return dg.asset(**kwargs)(fn) if fn is not None else dg.asset(**kwargs)

    return asset


def upstream(*refs: str) -> dict[str, dg.AssetIn]:
    """Inputs by `group/asset` name: the parameter is named after the asset."""
    out = {}
    for ref in refs:
        group, name = ref.split("/")
        out[name] = dg.AssetIn(key=[group, name])
    return out


def value_counts(df: pl.DataFrame, column: str, prefix: str) -> dict[str, int]:
    """`<prefix><value>: rows` for metadata (nulls not counted)."""
    return {f"{prefix}{k}": int(v) for k, v in df.group_by(column).len().drop_nulls(column).iter_rows()}


def status_counts(df: pl.DataFrame, column: str = "status") -> dict[str, int]:
    """`status_<value>: rows` for metadata."""
    return value_counts(df, column, f"{column}_")
