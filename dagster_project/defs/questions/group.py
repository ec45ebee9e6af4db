"""Registry entry of ClariLM's seed questions: Q^L from the logs, personas, Q^G generated from personas."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import polars as pl

from dagster_project.config import Params
from dagster_project.defs.questions import assets
from dagster_project.lib.groups import GroupSpec
from dagster_project.lib.headlines import stage_rows

STAGE_ASSETS = ("seed_questions_ql", "seed_questions_qg", "question_set")


def inputs(p: Params) -> list[tuple[str, str]]:
    return [("questions.personas_path", p.questions.personas_path),
            *((f"questions.seed_files[{i}]", v) for i, v in enumerate(p.questions.seed_files))]


def headlines(base: Path) -> list[tuple[str, pl.DataFrame | None]]:
    return [("ClariLM stages: rows and pass rate (share kept, else share status ok)",
             stage_rows(base, "questions", STAGE_ASSETS))]


GROUP = GroupSpec(
    name="questions",
    build=lambda _p: dg.Definitions(assets=dg.load_assets_from_modules([assets])),
    params=("llm", "embedder", "quality", "questions"),
    inputs=inputs,
    headlines=headlines,
    refresh_after_logs=True,
    doc="ClariLM: seed question sets Q^L and Q^G",
)
