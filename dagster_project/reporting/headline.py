"""Headline numbers per group as small JSON files (DVC metrics), accuracy-by-turn tables and training loss curves
(DVC plots).

Reads the built assets' Parquet tables (never runs anything), so `dvc exp show --only-metrics` and
`dvc metrics diff` compare experiments by their results instead of by 280 param columns.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import polars as pl

from dagster_project.defs.registry import GROUPS
from dagster_project.io.writers import atomic_path
from dagster_project.lib.warehouse import ASSETS_DIR, read_asset

METRICS_DIR = "metrics"
PLOTS_DIR = "plots"
ACCURACY_BY_TURN = "accuracy_by_turn"
LOSS_CURVE = "loss_curve"
# metrics/<name>.json -> the function that computes it, from each registered group's entry
HEADLINES: dict[str, Callable[[str | Path], dict | None]] = {g.metrics[0]: g.metrics[1] for g in GROUPS if g.metrics}
# the asset groups the headline reads (dvc.yaml: the `metrics` stage's deps)
SOURCE_GROUPS = tuple(dict.fromkeys(x for g in GROUPS if g.metrics for x in (*g.metrics_reads, g.name)))


def accuracy_by_turn(base: str | Path) -> dict[str, pl.DataFrame]:
    """One small table (turn, accuracy, n) per dataset x subject x method, from metric_tables' by_turn rows."""
    t = read_asset(base, "evaluation", "metric_tables")
    if t is None or "breakdown" not in t.columns:
        return {}
    t = t.filter(pl.col("breakdown") == "by_turn")
    out = {}
    for (dataset, subject, method), g in t.group_by(["dataset", "subject", "method"]):
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{dataset}-{subject}-{method}")
        out[name] = g.select("turn", "accuracy", "n").sort("turn")
    return dict(sorted(out.items()))


def loss_curves(base: str | Path) -> dict[str, pl.DataFrame]:
    """(step, loss) per trained model folder assets/training/<model>/loss_curve.parquet."""
    out = {}
    for path in sorted(Path(base, "training").glob("*/loss_curve.parquet")):
        t = pl.read_parquet(path)
        if {"step", "loss"} <= set(t.columns):
            out[path.parent.name] = t.select("step", "loss").sort("step")
    return out


def _write_json(data: dict, path: Path) -> None:
    with atomic_path(path, ".json") as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def write_headlines(base: str | Path = ASSETS_DIR, metrics_dir: str | Path = METRICS_DIR,
                    plots_dir: str | Path = PLOTS_DIR) -> tuple[list[str], list[str]]:
    """Write metrics_dir/<group>.json for every group whose tables exist, plots_dir/accuracy_by_turn/*.csv and
    plots_dir/loss_curve/<model>.csv.

    A group without its tables gets no file (a stale one is removed), never an error.
    Returns (groups written, groups left out)."""
    metrics_dir, plots_dir = Path(metrics_dir), Path(plots_dir)
    metrics_dir.mkdir(parents=True, exist_ok=True)
    written, missing = [], []
    for group, headline in HEADLINES.items():
        data = headline(Path(base))
        target = metrics_dir / f"{group}.json"
        if data is None:
            missing.append(group)
            target.unlink(missing_ok=True)
            continue
        _write_json({group: data}, target)  # the group's name heads every column of `dvc exp show`
        written.append(group)
    for plot, tables in ((ACCURACY_BY_TURN, accuracy_by_turn(base)), (LOSS_CURVE, loss_curves(base))):
        folder = plots_dir / plot
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for name, table in tables.items():
            with atomic_path(folder / f"{name}.csv", ".csv") as tmp:
                table.write_csv(tmp)
    return written, missing
