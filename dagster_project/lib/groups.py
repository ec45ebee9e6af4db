"""The shape of one asset group's registry entry (defs/<group>/group.py declares one; defs/registry.py lists them).

Everything that loops over the groups (definitions.py, preflight, `clarify metrics`, the report index, the DVC
stage generator) reads these fields, so a new paper's group is one package plus one line in defs/registry.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    import dagster as dg

    from dagster_project.config import Params

Inputs = Callable[["Params"], list[tuple[str, str]]]
"""(dotted params key, path or glob) of every input file the group reads; unset optional ones left out."""
Headlines = Callable[[Path], list[tuple[str, pl.DataFrame | None]]]
"""(caption, small table or None when not built) for the report index, read from the built assets."""
Metrics = Callable[[Path], dict | None]
"""The nested numbers `clarify metrics` writes to metrics/<name>.json (None when the tables are not built)."""


def no_inputs(_params: Params) -> list[tuple[str, str]]:
    return []


def no_headlines(_base: Path) -> list[tuple[str, pl.DataFrame | None]]:
    return []


@dataclass(frozen=True)
class GroupSpec:
    """One asset group: its Dagster definitions, params sections, inputs, headlines and DVC stage."""

    name: str  # Dagster group name = DVC stage name = assets/<name>/ = `clarify materialize <name>`
    build: Callable[[Params], dg.Definitions]  # assets, jobs, sensors and schedules built from the params
    params: tuple[str, ...]  # params.yaml sections (or dotted keys) the stage reads: its DVC `params:`
    reads: tuple[str, ...] = ()  # groups whose files it reads outside the asset graph (e.g. exports): DVC deps
    inputs: Inputs = no_inputs
    headlines: Headlines = no_headlines
    metrics: tuple[str, Metrics] | None = None  # (metrics file name, function) for `clarify metrics`
    metrics_reads: tuple[str, ...] = ()  # other groups whose tables its metrics read (the metrics stage's deps)
    refresh_after_logs: bool = False  # its assets that read the logs refresh when new log days land
    doc: str = ""  # one line for docs and `clarify doctor`
