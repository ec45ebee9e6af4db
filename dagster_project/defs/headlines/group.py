"""Registry entry of the headlines group: each paper's headline table with its trained models (downstream of
`training`): intents Tables 2/4/7, double-turn Table 1, ClariMM Tables 3/4."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from dagster_project.defs.headlines import assets
from dagster_project.lib.groups import GroupSpec
from dagster_project.lib.headlines import nest, pick
from dagster_project.lib.warehouse import read_asset

INTENT_METRICS = ("ic_accuracy", "sdrs", "ars", "ood_accuracy", "ood_dropout_accuracy")
TABLE1_METRICS = ("avg_turns", "f1_unambiguous", "f1_ambiguous", "f1_total", "da_accuracy")
RANKING_METRICS = ("n_queries", "mrr", "ndcg_at_5")


def _ours(base: Path, name: str, column: str = "system") -> pl.DataFrame | None:
    t = read_asset(base, "headlines", name)
    return None if t is None else t.filter(pl.col(column) != "published")


def headlines(base: Path) -> list[tuple[str, pl.DataFrame | None]]:
    return [
        ("intents Tables 2/4/7 with the tuned models (intents_headline)",
         pick(_ours(base, "intents_headline"), ["system", "subject"], lambda c: c in INTENT_METRICS)),
        ("double-turn Table 1 with the trained models (double_turn_table1)",
         pick(read_asset(base, "headlines", "double_turn_table1"), ["model", "system"],
              lambda c: c in TABLE1_METRICS)),
        ("ClariMM Tables 3/4 on the test split (retrieval_headline)",
         pick(_ours(base, "retrieval_headline"), ["input", "ranker", "modality"], lambda c: c in RANKING_METRICS)),
    ]


def metrics(base: Path) -> dict | None:
    """Per paper: our headline numbers per subject / model x system / ranker (published rows left out)."""
    out: dict = {}
    t = _ours(base, "intents_headline")
    if t is not None and not t.is_empty():
        out["intents"] = nest(t.to_dicts(), ["subject"], list(INTENT_METRICS))
    t = read_asset(base, "headlines", "double_turn_table1")
    if t is not None and not t.is_empty():
        out["double_turn"] = nest(t.drop_nulls("system").to_dicts(), ["subject", "system"], list(TABLE1_METRICS))
    t = _ours(base, "retrieval_headline")
    if t is not None and not t.is_empty():
        out["retrieval"] = nest(t.filter(pl.col("breakdown") == "overall").to_dicts(), ["input", "ranker", "modality"],
                                list(RANKING_METRICS))
    return out or None


GROUP = GroupSpec(
    name="headlines",
    build=assets.build,
    params=("llm", "quality", "evaluation.trained_baseline", "evaluation.significance_alpha",
            "evaluation.min_n_significance", "evaluation.ttest_min_n", "intents", "double_turn", "retrieval",
            "training.models", "training.base_model", "training.device", "training.dtype", "training.yes_no_reranker"),
    headlines=headlines,
    metrics=("headlines", metrics),
    doc="Each paper's headline table with its trained models, in the paper's own evaluation, beside its numbers",
)
