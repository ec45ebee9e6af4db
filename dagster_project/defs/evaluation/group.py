"""Registry entry of ClarifyMT-Bench's evaluation: predictions per subject x method, judge scores, metric tables."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from dagster_project.config import Params
from dagster_project.core.clarifymt.judge import pairwise_summary
from dagster_project.defs.evaluation import assets
from dagster_project.lib.groups import GroupSpec
from dagster_project.lib.headlines import nest, pick
from dagster_project.lib.warehouse import read_asset

HEADLINE_COLUMNS = ("accuracy", "accuracy_ci_low", "accuracy_ci_high", "clarify_f1", "macro_f1", "calls_per_turn")


def inputs(p: Params) -> list[tuple[str, str]]:
    return [(f"evaluation.external.{name}.path", ds.path) for name, ds in p.evaluation.external.items()]


def figure4(base: Path) -> pl.DataFrame | None:
    """ClariLM Fig. 4: win / tie / lose of one model against another per dataset (evaluation.judge_subject_pairs)."""
    pw = read_asset(base, "evaluation", "pairwise_judgements")
    if pw is None or pw.is_empty() or "comparison" not in pw.columns:
        return None
    t = pairwise_summary(pw).filter(pl.col("comparison") == "subjects")
    return None if t.is_empty() else t.select("dataset", "subject", "subject_b", "n", "win", "tie", "lose", "errors")


def headlines(base: Path) -> list[tuple[str, pl.DataFrame | None]]:
    return [("accuracy over all turns (method_comparison)", pick(
        read_asset(base, "evaluation", "method_comparison"), ["dataset", "subject", "method", "n"],
        lambda c: c in HEADLINE_COLUMNS, ("scope", "all_turns"))),
        ("ClariLM Fig. 4: model vs model, win / tie / lose per dataset (pairwise_judgements)", figure4(base))]


def metrics(base: Path) -> dict | None:
    """Accuracy, clarify-class F1 (ClariLM's F1) and macro-F1 over all turns per dataset x subject x method."""
    t = read_asset(base, "evaluation", "method_comparison")
    if t is None or t.is_empty() or "scope" not in t.columns:
        return None
    t = t.filter(pl.col("scope") == "all_turns")
    return nest(t.to_dicts(), ["dataset", "subject", "method"], ["accuracy", "clarify_f1", "macro_f1", "n"]) or None


GROUP = GroupSpec(
    name="evaluation",
    build=assets.build,
    params=("llm", "embedder", "quality", "evaluation"),
    reads=("double_turn", "intents"),  # held_out_disjoint reads the training exports by path
    inputs=inputs,
    headlines=headlines,
    metrics=("evaluation", metrics),
    doc="ClarifyMT-Bench and external datasets: predictions, judge scores, metric tables, report",
)
