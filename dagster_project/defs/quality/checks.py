"""Dagster asset checks built from Great Expectations suites in expectations/<group>.<asset>.yaml.

A suite file names its asset, whether the check blocks downstream assets, and a list of expectations
(GX 1.x names in snake_case + kwargs). An expectation may carry a `query`: DuckDB SQL over the asset
(as table `t`) whose result is validated instead, for reconciliations and per-group rules.
Kwargs may reference params.yaml values as "${section.key}", and "${statuses}" is the one list of LLM row
statuses (llm.task.Status); inside a list it is spliced in (`["${statuses}", skipped]`). A suite whose `asset` is `*/*_rejected` is a template: it checks every quarantine
table (io.records.Quarantine) of the graph.

A table is never loaded whole: DuckDB reads its Parquet file(s) where they lie, and a table (or query result) over
CHUNK_ROWS rows is validated a chunk at a time for row-wise rules, with uniqueness, max/min and row counts computed
by DuckDB over every row (`_validate_query`); verdicts and counts are those of one whole-table validation.

Every check also holds the asset to `quality.max_error_rate` per partition (its Parquet rows' `status`) and
per role (the `llm/<role>/requests` / `llm/<role>/errors` metadata of each partition's latest materialization):
an endpoint that is down for one method or one role fails the check even when the whole table's rate is low.
"""


import dataclasses
import json
import logging
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb
import pandas as pd
import polars as pl

from dagster_project.config import Params
from dagster_project.lib.catalog import load_yaml
from dagster_project.lib.warehouse import (
    ASSETS_DIR,
    asset_path,
    partition_dir,
    partition_files,
    partition_label,
)
from dagster_project.llm.chat import parse_usage_key, usage_key
from dagster_project.llm.task import STATUSES, Status

SUITES_DIR = Path(__file__).resolve().parents[3] / "expectations"
CONSTANTS: dict[str, Any] = {"statuses": list(STATUSES)}
TEMPLATE = "*/*_rejected"
_REF = re.compile(r"^\$\{([\w.]+)\}$")


@dataclass(frozen=True)
class Expectation:
    type: str
    kwargs: dict[str, Any]
    query: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class Suite:
    group: str
    asset: str
    blocking: bool
    description: str
    expectations: list[Expectation] = field(default_factory=list)


def load_suite(path: Path) -> Suite:
    """Parse one suite file; errors name the file and the expectation index."""
    data = load_yaml(path.read_text())
    try:
        group, asset = data["asset"].split("/")
        exps = [Expectation(e["type"], e.get("kwargs", {}), e.get("query"), e.get("name"))
                for e in data["expectations"]]
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ValueError(f"{path}: invalid suite ({err!r}); needs asset: <group>/<asset> and expectations") from None
    for i, e in enumerate(exps):
        if not hasattr(_gx().expectations, _camel(e.type)):
            raise ValueError(f"{path}: expectations[{i}]: unknown GX expectation {e.type!r}")
    return Suite(group, asset, bool(data.get("blocking", True)), data.get("description", ""), exps)


def load_suites(folder: Path = SUITES_DIR) -> list[Suite]:
    return [load_suite(p) for p in sorted(folder.glob("*.yaml"))]


def _camel(snake: str) -> str:
    return "".join(part.capitalize() for part in snake.split("_"))


@cache
def _gx():
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    import great_expectations as gx

    return gx


@cache
def _batch_definition():
    gx = _gx()
    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = {"globally": False, "metric_calculations": False, "profilers": False}
    ds = ctx.data_sources.add_pandas("frames")
    return ds.add_dataframe_asset("frame").add_batch_definition_whole_dataframe("whole")


def _resolve(value: Any, params: Params) -> Any:
    if isinstance(value, str) and (m := _REF.match(value)):
        if m.group(1) in CONSTANTS:
            return CONSTANTS[m.group(1)]
        obj: Any = params
        for part in m.group(1).split("."):
            obj = getattr(obj, part)
        return obj
    if isinstance(value, list):  # a reference to a list inside a list is spliced: ["${statuses}", skipped]
        out: list[Any] = []
        for v in value:
            r = _resolve(v, params)
            out.extend(r) if isinstance(r, list) and isinstance(v, str) else out.append(r)
        return out
    return value


def _plain(value: Any) -> Any:
    """numpy scalars and other non-JSON values as plain Python for check metadata."""
    return value.item() if hasattr(value, "item") else str(value)


def _config_key(config: Any) -> str:
    """An expectation's identity within one suite run: its type and kwargs (less the batch GX adds)."""
    return json.dumps([config.type, {k: v for k, v in config.kwargs.items() if k != "batch_id"}], sort_keys=True,
                      default=str)


COLUMN_KWARGS = ("column", "column_A", "column_B", "column_list")
CHUNK_ROWS = 65_536  # rows per GX batch: a big table is validated a chunk of its checked columns at a time
# DuckDB's share of a check (big queries, uniqueness): past this it spills to a temp folder instead of growing
DUCKDB_MEMORY = "64MB"
UNIQUE = ("expect_column_values_to_be_unique", "expect_compound_columns_to_be_unique")
EXTREMES = {"expect_column_max_to_be_between": "max", "expect_column_min_to_be_between": "min"}
ORDERED = ("expect_column_values_to_be_increasing", "expect_column_values_to_be_decreasing")  # row order spans chunks


def named_columns(expectations: list[Expectation]) -> set[str]:
    """Every column an expectation's kwargs name."""
    named: set[str] = set()
    for e in expectations:
        for key in COLUMN_KWARGS:
            value = e.kwargs.get(key)
            named |= set(value) if isinstance(value, list) else {value} if isinstance(value, str) else set()
    return named


def checked_columns(columns: list[str], expectations: list[Expectation]) -> list[str]:
    """The columns the expectations name (all, for a table-columns expectation), so GX's pandas copy of a wide
    frame (paper-scale predictions: 33 columns, long traces) holds only what is checked."""
    if any(_kind(e) == "schema" for e in expectations):
        return columns
    named = named_columns(expectations)
    # a missing column stays out, so GX reports it as the expectation's own failure; one column keeps the rows
    return [c for c in columns if c in named] or columns[:1]


def _kind(e: Expectation) -> str:
    """How a big table is validated: `map` chunk by chunk (a row-wise rule), `unique` in DuckDB over every row,
    `extreme` on DuckDB's max/min, `rows` on DuckDB's count, `schema` on the columns alone, `whole` on all rows."""
    if e.type in UNIQUE:
        return "unique"
    if e.type in EXTREMES:
        return "extreme"
    if e.type.startswith("expect_table_row_count"):
        return "rows"
    if e.type.startswith("expect_table_column") or e.type == "expect_column_to_exist":
        return "schema"
    gx = _gx()
    from great_expectations.expectations.expectation import (
        ColumnMapExpectation,
        ColumnPairMapExpectation,
        MulticolumnMapExpectation,
    )

    cls = getattr(gx.expectations, _camel(e.type))
    if issubclass(cls, ColumnMapExpectation | ColumnPairMapExpectation | MulticolumnMapExpectation) \
            and e.type not in ORDERED:
        return "map"
    return "whole"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@contextmanager
def _connection(source: pl.DataFrame | list[Path]) -> Iterator[duckdb.DuckDBPyConnection]:
    """DuckDB with the asset as table `t`: a frame, or its Parquet file(s) read where they lie (partitions unioned
    by column name, hive folder names as string columns, as lib.warehouse.read_partition adds them)."""
    with tempfile.TemporaryDirectory(prefix="clarify_checks_") as tmp, \
            duckdb.connect(config={"memory_limit": DUCKDB_MEMORY, "temp_directory": tmp}) as con:
        con.execute("set enable_progress_bar = false")
        if isinstance(source, pl.DataFrame):
            con.register("t", source.to_arrow())
        else:
            files = ", ".join(_sql_str(str(f)) for f in source)
            con.execute(f"create view t as select * from read_parquet([{files}], union_by_name = true, "
                        "hive_partitioning = true, hive_types_autocast = false)")
        yield con


def _summary(result: dict[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (result or {}).items()
            if k in ("observed_value", "unexpected_count", "element_count", "partial_unexpected_list")}


class _Run:
    """One GX validation per frame: the expectations on one frame run as one GX suite (one batch and one metric pass
    instead of one per expectation: 2-3x faster; GX was a warm paper-scale rerun's top cost after MiniLM)."""

    def __init__(self, suite: Suite, params: Params):
        self.suite, self.params = suite, params

    def validate(self, frame: pd.DataFrame, idx: list[int]) -> dict[int, dict[str, Any]]:
        gx = _gx()
        exps = [getattr(gx.expectations, _camel(self.suite.expectations[i].type))(
            **{k: _resolve(v, self.params) for k, v in self.suite.expectations[i].kwargs.items()}) for i in idx]
        run = _batch_definition().get_batch(batch_parameters={"dataframe": frame}).validate(
            gx.ExpectationSuite(name=f"{self.suite.group}.{self.suite.asset}", expectations=exps))
        by_config = {_config_key(r.expectation_config): r for r in run.results}  # GX reorders them
        out = {}
        for i, exp in zip(idx, exps, strict=True):
            if (key := _config_key(exp.configuration)) not in by_config:
                raise RuntimeError(f"{self.suite.group}.{self.suite.asset}: GX returned no result for expectation "
                                   f"{i} ({key})")
            r = by_config[key]
            out[i] = {"success": bool(r.success), **(r.result or {})}
        return out


def _merge(parts: list[dict[str, Any]], mostly: float | None) -> dict[str, Any]:
    """One row-wise expectation's results on consecutive chunks as one result: counts added, the first 20
    unexpected values; with `mostly`, success from the summed counts as GX computes it for one frame."""
    out: dict[str, Any] = {"success": all(p["success"] for p in parts)}
    for key in ("element_count", "missing_count", "unexpected_count"):
        if all(key in p for p in parts):
            out[key] = sum(p[key] for p in parts)
    if any("partial_unexpected_list" in p for p in parts):
        out["partial_unexpected_list"] = [v for p in parts for v in p.get("partial_unexpected_list", [])][:20]
    if mostly is not None and "unexpected_count" in out and "element_count" in out:
        considered = out["element_count"] - out.get("missing_count", 0)
        out["success"] = considered == 0 or (considered - out["unexpected_count"]) / considered >= mostly
    return out


def _unique(con: duckdb.DuckDBPyConnection, sql: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """GX's uniqueness rules over every row, in DuckDB: rows whose value (or value combination) occurs more than
    once are unexpected; a null value (a row whose checked columns are all null, for compound keys, or as
    `ignore_row_if` says) is not considered."""
    cols = [kwargs["column"]] if "column" in kwargs else list(kwargs["column_list"])
    keys = ", ".join(map(_ident, cols))
    rule = kwargs.get("ignore_row_if", "all_values_are_missing" if "column_list" in kwargs else "any_value_is_missing")
    skip = {"all_values_are_missing": " and ".join(f"{_ident(c)} is null" for c in cols),
            "any_value_is_missing": " or ".join(f"{_ident(c)} is null" for c in cols), "never": "false"}[rule]
    try:
        [(total, missing)] = con.sql(f"select count(*), count(*) filter (where {skip}) from ({sql})").fetchall()
        dups = f"select {keys}, count(*) as n from ({sql}) where not ({skip}) group by all having count(*) > 1"
        [(unexpected,)] = con.sql(f"select coalesce(sum(n), 0) from ({dups})").fetchall()
        sample = con.sql(f"select * from ({dups}) order by all limit 20").fetchall()
    except duckdb.Error as err:
        return {"success": False, "error": str(err).splitlines()[0]}
    values = [row[0] if len(cols) == 1 else dict(zip(cols, row[:-1], strict=True)) for row in sample
              for _ in range(row[-1])]
    considered, mostly = total - missing, kwargs.get("mostly")
    success = unexpected == 0 if mostly is None else (
        considered == 0 or (considered - unexpected) / considered >= mostly)
    return {"success": bool(success), "element_count": total, "missing_count": missing,
            "unexpected_count": int(unexpected), "partial_unexpected_list": values[:20]}


def _validate_query(con: duckdb.DuckDBPyConnection, sql: str, idx: list[int], run: _Run) -> dict[int, dict[str, Any]]:
    """The expectations on one frame (the asset, or one `query` of it). A frame of at most CHUNK_ROWS rows is
    validated whole, as one GX batch. A bigger one never is: row-wise rules run chunk by chunk, uniqueness in
    DuckDB over every row, max/min on DuckDB's aggregate, row counts on DuckDB's count, column lists on the schema."""
    exps = {i: run.suite.expectations[i] for i in idx}
    columns = con.sql(sql).columns  # bound, not run
    cols = ", ".join(map(_ident, checked_columns(columns, list(exps.values()))))
    vectors = max(1, CHUNK_ROWS // 2048)  # DuckDB hands results over in vectors of 2,048 rows
    kinds = {i: _kind(e) for i, e in exps.items()}
    mapped = [i for i in idx if kinds[i] == "map"]
    parts: dict[int, list[dict[str, Any]]] = {i: [] for i in mapped}
    con.execute(f"select {cols} from ({sql})")
    try:
        chunk, pending = con.fetch_df_chunk(vectors), con.fetch_df_chunk(vectors)
        if pending.empty:
            return run.validate(chunk, idx)
        while mapped and not chunk.empty:
            for i, r in run.validate(chunk, mapped).items():
                parts[i].append(r)
            chunk, pending = pending, (con.fetch_df_chunk(vectors) if not pending.empty else pending)
        del chunk, pending
    finally:
        con.abort()  # the rest of the result, when no row-wise rule read it
    out = {i: _merge(parts[i], _resolve(exps[i].kwargs.get("mostly"), run.params)) for i in mapped}
    for i in idx:
        kwargs = {k: _resolve(v, run.params) for k, v in exps[i].kwargs.items()}
        if kinds[i] == "unique":
            out[i] = _unique(con, sql, kwargs)
        elif kinds[i] == "extreme":
            col = _ident(kwargs.get("column", ""))
            try:
                frame = con.sql(f"select {EXTREMES[exps[i].type]}({col}) as {col} from ({sql})").df()
            except duckdb.BinderException:  # a missing column: GX reports it
                frame = con.sql(f"select * from ({sql}) limit 0").df()
            out |= run.validate(frame, [i])
        elif kinds[i] == "rows":
            [(n,)] = con.sql(f"select count(*) from ({sql})").fetchall()
            out |= run.validate(pd.DataFrame(index=pd.RangeIndex(n)), [i])
        elif kinds[i] == "schema":
            out |= run.validate(con.sql(f"select * from ({sql}) limit 0").df(), [i])
        elif kinds[i] == "whole":  # no rule of this kind in expectations/ yet: all rows of its columns at once
            keep = ", ".join(map(_ident, checked_columns(columns, [exps[i]])))
            out |= run.validate(con.sql(f"select {keep} from ({sql})").df(), [i])
    return out


def validate_frame(source: pl.DataFrame | list[Path], suite: Suite, params: Params
                   ) -> tuple[bool, dict[str, Any]]:
    """Run every expectation of the suite on an asset: a frame, or its Parquet files, which DuckDB reads where they
    lie (memory is bounded by CHUNK_ROWS and DUCKDB_MEMORY, not by the table). Returns (all passed,
    per-expectation metadata)."""
    by_query: dict[str | None, list[int]] = {}
    for i, e in enumerate(suite.expectations):
        by_query.setdefault(e.query, []).append(i)
    run = _Run(suite, params)
    outcomes: dict[int, dict[str, Any]] = {}
    with _connection(source) as con:
        for query, idx in by_query.items():
            sql = "select * from t" if query is None else query.strip().rstrip(";")
            outcomes |= _validate_query(con, sql, idx, run)
    results: dict[str, Any] = {}
    for i, e in enumerate(suite.expectations):
        r = outcomes[i]
        extra = {"error": r["error"]} if "error" in r else {}
        results[f"{i:02d} {e.name or e.type}"] = json.loads(json.dumps(
            {"success": bool(r["success"]), **_summary(r), **extra}, default=_plain))
    return all(v["success"] for v in results.values()), results


def partition_error_counts(base: str | Path, group: str, asset: str) -> dict[str, tuple[int, int]]:
    """partition -> (llm_error rows, rows) for each stored partition of an asset with a `status` column."""
    counts: dict[str, tuple[int, int]] = {}
    folder = partition_dir(base, group, asset)
    for f in partition_files(base, group, asset):
        if "status" in pl.read_parquet_schema(f):  # counted while scanning: the column is never held whole
            errors, rows = pl.scan_parquet(f).select((pl.col("status") == Status.LLM_ERROR.value).sum(),
                                                     pl.len()).collect().row(0)
            counts[partition_label(folder, f)] = (int(errors or 0), int(rows))
    return counts


def role_error_counts(instance: dg.DagsterInstance, key: dg.AssetKey) -> dict[str, tuple[int, int]]:
    """'<partition>: <role>' (or '<role>') -> (failed requests, requests), from each partition's latest
    materialization metadata (LLMSession.usage())."""
    latest: dict[str | None, dict[str, Any]] = {}
    for rec in instance.fetch_materializations(key, limit=10_000).records:  # newest first
        if rec.partition_key not in latest and rec.asset_materialization is not None:
            latest[rec.partition_key] = rec.asset_materialization.metadata
    counts: dict[str, tuple[int, int]] = {}
    for partition, meta in latest.items():
        for name, errors in meta.items():
            role, metric = parse_usage_key(name) or (None, "")
            if role and metric == "errors" and (requests := usage_key("requests", role)) in meta:
                label = f"{partition}: {role}" if partition else role
                counts[label] = (int(_value(errors)), int(_value(meta[requests])))
    return counts


def _value(v: Any) -> Any:
    return getattr(v, "value", v)


def error_budget(counts: dict[str, tuple[int, int]], max_rate: float) -> dict[str, Any]:
    """One check result: passes when no group's error share exceeds max_rate; names the groups that do."""
    over = {g: {"errors": e, "of": n, "rate": round(e / n, 4)} for g, (e, n) in sorted(counts.items())
            if n and e / n > max_rate}
    return {"success": not over, "groups": len(counts), "max_error_rate": max_rate, "over_budget": over}


def _make_check(suite: Suite) -> dg.AssetChecksDefinition:
    key = dg.AssetKey([suite.group, suite.asset])

    @dg.asset_check(asset=key, name=f"gx_{suite.asset}", blocking=suite.blocking,
                    description=suite.description or f"Great Expectations suite for {suite.group}.{suite.asset}")
    def _check(context: dg.AssetCheckExecutionContext, params: dg.ResourceParam[Params]) -> dg.AssetCheckResult:
        path = asset_path(ASSETS_DIR, suite.group, suite.asset)
        files = [path] if path.exists() else partition_files(ASSETS_DIR, suite.group, suite.asset)
        if not files:
            return dg.AssetCheckResult(passed=False, metadata={"error": f"{path} not found"})
        ok, results = validate_frame(files, suite, params)
        budgets = {"error budget per partition": partition_error_counts(ASSETS_DIR, suite.group, suite.asset),
                   "error budget per role": role_error_counts(context.instance, key)}
        for label, counts in budgets.items():
            if counts:
                results[label] = error_budget(counts, params.quality.max_error_rate)
                ok &= results[label]["success"]
        failed = [k for k, v in results.items() if not v["success"]]
        return dg.AssetCheckResult(
            passed=ok, severity=dg.AssetCheckSeverity.ERROR,
            metadata={"expectations": len(results), "failed": dg.MetadataValue.json(failed),
                      "results": dg.MetadataValue.json(results)})

    return _check


def build_checks(keys: set[dg.AssetKey], folder: Path = SUITES_DIR) -> list[dg.AssetChecksDefinition]:
    """One check per asset in `keys` that has a suite. Every `*_rejected` asset gets the template suite's
    expectations, followed by those of its own suite if it has one."""
    suites = {(s.group, s.asset): s for s in load_suites(folder)}
    template = suites.pop(tuple(TEMPLATE.split("/")), None)
    checks = []
    for key in sorted(keys):
        group, asset = key.path[0], key.path[-1]
        own = suites.get((group, asset))
        if template is not None and asset.endswith("_rejected"):
            base = dataclasses.replace(template, group=group, asset=asset)
            own = base if own is None else dataclasses.replace(
                own, expectations=[*template.expectations, *own.expectations])
        if own is not None:
            checks.append(_make_check(own))
    return checks
