"""What `clarify timings` prints: per stage (one `clarify materialize <group>`, as `dvc repro` runs it) the wall time
against the model's own generation time, from the Dagster run history, so the time spent outside the model shows.

Reads the instance only (never runs anything). A stage is the newest invocation of each group: the runs that share
its invocation tag (runs/instance.py); its wall time runs from the command's process start to the last run's end.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import dagster as dg
from rich import box
from rich.table import Table
from rich.text import Text

from dagster_project.llm.chat import usage_key
from dagster_project.runs.instance import GROUP_TAG, INVOCATION_STARTED_TAG, INVOCATION_TAG

RUN_LIMIT = 20_000  # newest runs read; a demo makes a few dozen per `dvc repro`
USAGE = {"model_s": usage_key("model_s"), "calls": usage_key("new_calls"), "hits": usage_key("cache_hits")}


@dataclass(frozen=True)
class StageTiming:
    """One stage's numbers: wall seconds (start-up included), model seconds, new LLM calls, cache hits, runs."""

    group: str
    started: float  # epoch seconds
    wall_s: float
    model_s: float
    calls: int
    cache_hits: int
    runs: int
    failed: int


def _value(v: object) -> float:
    return float(getattr(v, "value", v) or 0)


def run_usage(instance: dg.DagsterInstance, run_id: str) -> dict[str, float]:
    """model_s, calls and hits summed over the run's materializations (each asset's LLMSession usage)."""
    total = dict.fromkeys(USAGE, 0.0)
    for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
        meta = entry.asset_materialization.metadata if entry.asset_materialization else {}
        for name, key in USAGE.items():
            if key in meta:
                total[name] += _value(meta[key])
    return total


def _stage(instance: dg.DagsterInstance, group: str, records: list) -> StageTiming:
    starts = [r.start_time for r in records if r.start_time is not None]
    ends = [r.end_time for r in records if r.end_time is not None]
    began = records[0].dagster_run.tags.get(INVOCATION_STARTED_TAG)
    start = float(began) if began else min(starts, default=0.0)
    usage = [run_usage(instance, r.dagster_run.run_id) for r in records]
    return StageTiming(
        group=group, started=start, wall_s=max(max(ends, default=start) - start, 0.0),
        model_s=sum(u["model_s"] for u in usage), calls=int(sum(u["calls"] for u in usage)),
        cache_hits=int(sum(u["hits"] for u in usage)), runs=len(records),
        failed=sum(r.dagster_run.status == dg.DagsterRunStatus.FAILURE for r in records))


def stage_timings(instance: dg.DagsterInstance, groups: Iterable[str] | None = None) -> list[StageTiming]:
    """The newest invocation of each group (or of the named ones), in the order they started."""
    by_invocation: dict[str, list] = defaultdict(list)
    newest: dict[str, str] = {}  # group -> its newest invocation (records arrive newest first)
    for rec in instance.get_run_records(limit=RUN_LIMIT):
        tags = rec.dagster_run.tags
        inv, group = tags.get(INVOCATION_TAG), tags.get(GROUP_TAG)
        if not inv or not group:  # a run from the UI or an older `clarify materialize`: no stage to count it in
            continue
        newest.setdefault(group, inv)
        by_invocation[inv].append(rec)
    wanted = set(groups) if groups is not None else set(newest)
    stages = [_stage(instance, g, by_invocation[inv]) for g, inv in newest.items() if g in wanted]
    return sorted(stages, key=lambda s: s.started)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def total_line(stages: list[StageTiming]) -> str:
    """The one-line verdict, e.g. 'model 9.1 min of 27.3 min (33%) in 11 stages'."""
    wall, model = sum(s.wall_s for s in stages), sum(s.model_s for s in stages)
    share = f" ({model / wall:.0%})" if wall else ""
    return f"model {_minutes(model)} of {_minutes(wall)}{share} in {len(stages)} stage{'s' * (len(stages) != 1)}"


def timings_table(stages: list[StageTiming]) -> Table:
    """One row per stage: when it started, runs, wall, model time and its share, new calls, cache hits."""
    table = Table(title=Text("Stage time vs model time (newest run of each group)", style="table.title"),
                  box=box.SIMPLE_HEAD, show_edge=False, title_justify="left", pad_edge=False, padding=(0, 1))
    for name in ("stage", "started", "runs", "wall s", "model s", "model %", "calls", "cache hits"):
        table.add_column(name, justify="left" if name in ("stage", "started") else "right")
    for s in stages:
        share = f"{s.model_s / s.wall_s:.0%}" if s.wall_s else ""
        runs = f"{s.runs} ({s.failed} failed)" if s.failed else str(s.runs)
        table.add_row(Text(s.group), datetime.fromtimestamp(s.started).strftime("%m-%d %H:%M:%S"), runs,
                      f"{s.wall_s:.1f}", f"{s.model_s:.1f}", share, str(s.calls), str(s.cache_hits))
    return table
