"""Dagster catalog metadata every stored asset gets (row count, column schema with descriptions, a preview of
small tables), emitted once by the IO manager so no asset has to. Column descriptions live in columns.yaml."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

import dagster as dg
import polars as pl
import yaml

PREVIEW_MAX_ROWS, PREVIEW_MAX_COLUMNS, PREVIEW_MAX_CHARS = 20, 8, 120


@cache
def column_docs() -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """(descriptions shared by every asset, per-asset overrides keyed '<group>/<asset>') from columns.yaml."""
    data = yaml.safe_load(resources.files(__package__).joinpath("columns.yaml").read_text(encoding="utf-8"))
    return dict(data.get("common") or {}), {k: dict(v or {}) for k, v in (data.get("assets") or {}).items()}


def describe(asset: str, column: str) -> str | None:
    """A column's description: the asset's own entry, else the shared one, else None (undocumented)."""
    common, per_asset = column_docs()
    return per_asset.get(asset, {}).get(column) or common.get(column)


def column_schema(df: pl.DataFrame, asset: str) -> dg.TableSchema:
    """The frame's columns with their polars type and description, for `dagster/column_schema`."""
    return dg.TableSchema(columns=[dg.TableColumn(name, str(dtype), description=describe(asset, name))
                                   for name, dtype in df.schema.items()])


def _cell(value: Any) -> str | int | float | bool | None:
    if value is None or isinstance(value, (bool, int, float)):
        return value
    text = str(value)
    return text if len(text) <= PREVIEW_MAX_CHARS else text[:PREVIEW_MAX_CHARS - 1] + "…"


def preview(df: pl.DataFrame, schema: dg.TableSchema) -> dg.TableMetadataValue | None:
    """The whole table as a Dagster table value when it is small enough to read at a glance, else None."""
    if df.height == 0 or df.height > PREVIEW_MAX_ROWS or df.width > PREVIEW_MAX_COLUMNS:
        return None
    records = [dg.TableRecord({k: _cell(v) for k, v in row.items()}) for row in df.iter_rows(named=True)]
    return dg.MetadataValue.table(records, schema=schema)


def table_metadata(df: pl.DataFrame, asset: str) -> dict[str, Any]:
    """`dagster/row_count`, `dagster/column_schema` and, for small tables, `preview` of one stored frame."""
    schema = column_schema(df, asset)
    meta: dict[str, Any] = {"dagster/row_count": df.height, "dagster/column_schema": schema}
    if (table := preview(df, schema)) is not None:
        meta["preview"] = table
    return meta
