"""Registry entry of ClariLM's log mining (FM-LOG step 1-2): raw logs by day, candidates, extractions."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from dagster_project.config import Params
from dagster_project.defs.logs import assets
from dagster_project.lib.groups import GroupSpec
from dagster_project.lib.headlines import stage_rows

STAGE_ASSETS = ("log_candidates", "log_clarifications")


def inputs(p: Params) -> list[tuple[str, str]]:
    return [(f"logs.paths[{i}]", v) for i, v in enumerate(p.logs.paths)]


def headlines(base: Path) -> list[tuple[str, pl.DataFrame | None]]:
    return [("ClariLM stages: rows and pass rate (share kept, else share status ok)",
             stage_rows(base, "logs", STAGE_ASSETS))]


GROUP = GroupSpec(
    name="logs",
    build=assets.build,
    params=("llm", "quality", "logs"),
    inputs=inputs,
    headlines=headlines,
    doc="ClariLM: chat logs by day, clarification candidates, LLM extractions",
)
