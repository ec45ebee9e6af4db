"""Registry entry of intent classification with clarification: ambiguous queries, simulations, SDRS, IC accuracy."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import polars as pl

from dagster_project.config import Params
from dagster_project.defs.intents import assets
from dagster_project.lib.groups import GroupSpec
from dagster_project.lib.headlines import nest, pick
from dagster_project.lib.warehouse import read_asset

INTENT_METRICS = ("ic_accuracy", "sdrs", "ars", "ood_accuracy", "ood_dropout_accuracy")
INPUT_KEYS = ("dataset", "catalog", "few_shot", "ambiguous_dataset")


def inputs(p: Params) -> list[tuple[str, str]]:
    return [(f"intents.{k}", getattr(p.intents, k)) for k in INPUT_KEYS if getattr(p.intents, k)]


def headlines(base: Path) -> list[tuple[str, pl.DataFrame | None]]:
    return [("intent classification (intent_eval)", pick(read_asset(base, "intents", "intent_eval"), ["subject"],
                                                          lambda c: c in INTENT_METRICS))]


def metrics(base: Path) -> dict | None:
    """Intent-classification accuracy, SDRS and ARS per subject (intent_eval)."""
    t = read_asset(base, "intents", "intent_eval")
    if t is None or t.is_empty():
        return None
    return nest(t.to_dicts(), ["subject"], list(INTENT_METRICS)) or None


GROUP = GroupSpec(
    name="intents",
    build=lambda _p: dg.Definitions(assets=dg.load_assets_from_modules([assets])),
    params=("llm", "quality", "intents"),
    inputs=inputs,
    headlines=headlines,
    metrics=("intents", metrics),
    doc="Intent classification with clarification: simulated conversations, SDRS, IC accuracy, OOD",
)
