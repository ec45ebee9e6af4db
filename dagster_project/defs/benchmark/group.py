"""Registry entry of ClarifyMT-Bench's construction: queries, persona dialogues and the validation round."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import polars as pl

from dagster_project.config import Params
from dagster_project.defs.benchmark import assets
from dagster_project.lib.groups import GroupSpec
from dagster_project.lib.headlines import pick
from dagster_project.lib.warehouse import read_asset


def inputs(p: Params) -> list[tuple[str, str]]:
    out = [("benchmark.annotations_path", p.benchmark.annotations_path)]
    if p.benchmark.seed_dataset is not None:
        out.append(("benchmark.seed_dataset.path", p.benchmark.seed_dataset.path))
    return out


def headlines(base: Path) -> list[tuple[str, pl.DataFrame | None]]:
    return [("validation round (annotation_agreement)", pick(
        read_asset(base, "benchmark", "annotation_agreement"), ["path", "validated_rows", "valid"],
        lambda c: c.startswith("removed_") or c in ("observed_agreement", "kappa", "pearson_r")))]


GROUP = GroupSpec(
    name="benchmark",
    build=lambda _p: dg.Definitions(assets=dg.load_assets_from_modules([assets])),
    params=("llm", "embedder", "quality", "benchmark"),
    inputs=inputs,
    headlines=headlines,
    doc="ClarifyMT-Bench: single-turn queries, persona dialogues, validation round",
)
