"""Registry entry of the double-turn preferences paper: QA sets, simulated users, preferences, answer-set F1."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import polars as pl

from dagster_project.config import Params
from dagster_project.defs.double_turn import assets
from dagster_project.lib.groups import GroupSpec
from dagster_project.lib.headlines import nest, pick
from dagster_project.lib.warehouse import read_asset

ANSWER_SET_METRICS = ("f1_total", "f1_ambiguous", "f1_unambiguous", "avg_turns")


def inputs(p: Params) -> list[tuple[str, str]]:
    return [(f"double_turn.inputs[{i}].path", x.path) for i, x in enumerate(p.double_turn.inputs)]


def headlines(base: Path) -> list[tuple[str, pl.DataFrame | None]]:
    return [("answer-set F1 (answer_set_eval)", pick(read_asset(base, "double_turn", "answer_set_eval"),
                                                     ["subject", "system"], lambda c: c in ANSWER_SET_METRICS))]


def metrics(base: Path) -> dict | None:
    """Answer-set F1 (total / ambiguous / unambiguous) and average turns per subject x system."""
    t = read_asset(base, "double_turn", "answer_set_eval")
    if t is None or t.is_empty():
        return None
    return nest(t.to_dicts(), ["subject", "system"], list(ANSWER_SET_METRICS)) or None


GROUP = GroupSpec(
    name="double_turn",
    build=lambda _p: dg.Definitions(assets=dg.load_assets_from_modules([assets])),
    params=("llm", "quality", "double_turn"),
    inputs=inputs,
    headlines=headlines,
    metrics=("double_turn", metrics),
    doc="Double-turn preferences: simulated users per gold answer, preference pairs, answer-set F1",
)
