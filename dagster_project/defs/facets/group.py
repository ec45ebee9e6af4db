"""Registry entry of ClariLM's facet candidates: FM-LOG, FM-LLM and their fusion."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import polars as pl

from dagster_project.defs.facets import assets
from dagster_project.lib.groups import GroupSpec
from dagster_project.lib.headlines import stage_rows

STAGE_ASSETS = ("facet_candidates_log", "facet_candidates_llm", "facet_candidates")


def headlines(base: Path) -> list[tuple[str, pl.DataFrame | None]]:
    return [("ClariLM stages: rows and pass rate (share kept, else share status ok)",
             stage_rows(base, "facets", STAGE_ASSETS))]


GROUP = GroupSpec(
    name="facets",
    build=lambda _p: dg.Definitions(assets=dg.load_assets_from_modules([assets])),
    params=("llm", "embedder", "quality", "facets"),
    headlines=headlines,
    refresh_after_logs=True,
    doc="ClariLM: facet candidates (FM-LOG, FM-LLM, fused)",
)
