"""Dagster asset checks built from Great Expectations suites in expectations/<group>.<asset>.yaml.

A suite file names its asset, whether the check blocks downstream assets, and a list of expectations
(GX 1.x names in snake_case + kwargs). An expectation may carry a `query`: DuckDB SQL over the asset
(as table `t`) whose result is validated instead, for reconciliations and per-group rules.
Kwargs may reference params.yaml values as "${section.key}", and "${statuses}" is the one list of LLM row
statuses (llm.task.Status); inside a list it is spliced in (`["${statuses}", skipped]`). A suite whose `asset` is `*/*_rejected` is a template: it checks every quarantine
table (io.records.Quarantine) of the graph.

Every check also holds the asset to `quality.max_error_rate` per partition (its Parquet rows' `status`) and
per role (the `llm/<role>/requests` / `llm/<role>/errors` metadata of each partition's latest materialization):
an endpoint that is down for one method or one role fails the check even when the whole table's rate is low.
"""


import dataclasses
import json
import logging
import os
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb
import polars as pl
import yaml

from dagster_project.config import Params
from dagster_project.lib.warehouse import (
    ASSETS_DIR,
    asset_path,
    partition_dir,
    partition_files,
    partition_label,
    read_asset,
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
    data = yaml.safe_load(path.read_text())
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


def read_columns(df: pl.DataFrame, expectations: list[Expectation]) -> pl.DataFrame:
    """The columns the expectations name (all, for a table-columns expectation), so GX's pandas copy of a wide
    frame (paper-scale predictions: 33 columns, long traces) holds only what is checked."""
    if any(e.type.startswith("expect_table_column") for e in expectations):
        return df
    named: set[str] = set()
    for e in expectations:
        for key in COLUMN_KWARGS:
            value = e.kwargs.get(key)
            named |= set(value) if isinstance(value, list) else {value} if isinstance(value, str) else set()
    # a missing column stays out, so GX reports it as the expectation's own failure; one column keeps the rows
    keep = [c for c in df.columns if c in named] or df.columns[:1]
    return df.select(keep)


def validate_frame(df: pl.DataFrame, suite: Suite, params: Params) -> tuple[bool, dict[str, Any]]:
    """Run every expectation of the suite on the frame; return (all passed, per-expectation metadata).

    The expectations on one frame (the asset, or one `query` of it) are validated as one GX suite: one batch
    and one metric pass instead of one per expectation (2-3x faster; GX was a warm paper-scale rerun's top
    cost after MiniLM)."""
    gx = _gx()
    by_query: dict[str | None, list[int]] = {}
    for i, e in enumerate(suite.expectations):
        by_query.setdefault(e.query, []).append(i)
    outcomes: dict[int, Any] = {}
    for query, idx in by_query.items():
        if query is None:
            frame = read_columns(df, [suite.expectations[i] for i in idx]).to_pandas()
        else:
            with duckdb.connect() as con:
                con.register("t", df.to_arrow())
                frame = con.sql(query).df()
        exps = [getattr(gx.expectations, _camel(suite.expectations[i].type))(
            **{k: _resolve(v, params) for k, v in suite.expectations[i].kwargs.items()}) for i in idx]
        run = _batch_definition().get_batch(batch_parameters={"dataframe": frame}).validate(
            gx.ExpectationSuite(name=f"{suite.group}.{suite.asset}", expectations=exps))
        by_config = {_config_key(r.expectation_config): r for r in run.results}  # GX reorders them
        for i, exp in zip(idx, exps, strict=True):
            if (key := _config_key(exp.configuration)) not in by_config:
                raise RuntimeError(f"{suite.group}.{suite.asset}: GX returned no result for expectation {i} ({key})")
            outcomes[i] = by_config[key]
    results: dict[str, Any] = {}
    for i, e in enumerate(suite.expectations):
        r = outcomes[i]
        summary = {k: v for k, v in (r.result or {}).items()
                   if k in ("observed_value", "unexpected_count", "element_count", "partial_unexpected_list")}
        results[f"{i:02d} {e.name or e.type}"] = json.loads(json.dumps({"success": bool(r.success), **summary},
                                                                       default=_plain))
    return all(v["success"] for v in results.values()), results


def partition_error_counts(base: str | Path, group: str, asset: str) -> dict[str, tuple[int, int]]:
    """partition -> (llm_error rows, rows) for each stored partition of an asset with a `status` column."""
    counts: dict[str, tuple[int, int]] = {}
    folder = partition_dir(base, group, asset)
    for f in partition_files(base, group, asset):
        if "status" in pl.read_parquet_schema(f):
            status = pl.read_parquet(f, columns=["status"])["status"]
            counts[partition_label(folder, f)] = (
                int((status == Status.LLM_ERROR.value).sum()), status.len())
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
        frame = read_asset(ASSETS_DIR, suite.group, suite.asset)  # a file, or all partitions of one
        if frame is None:
            return dg.AssetCheckResult(passed=False, metadata={"error": f"{path} not found"})
        ok, results = validate_frame(frame, suite, params)
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
