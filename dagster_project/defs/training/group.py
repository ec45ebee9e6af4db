"""Registry entry of the training group: LoRA SFT/DPO models and the re-ranker, trained on the groups' exports."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from dagster_project.config import MODEL_NAMES, Params
from dagster_project.core.training.template import TrainedTemplate
from dagster_project.defs.training import assets
from dagster_project.lib.groups import GroupSpec
from dagster_project.lib.headlines import nest, pick
from dagster_project.lib.warehouse import read_asset
from dagster_project.training.exports import model_template

TRAINING_METRICS = ("rows", "steps", "final_loss", "wall_s", "tokens_per_s")


def _models(base: Path) -> pl.DataFrame | None:
    tables = [t for name in MODEL_NAMES if (t := read_asset(base, "training", name)) is not None]
    return pl.concat(tables, how="diagonal_relaxed") if tables else None


def learned_template(name: str, params: Params) -> TrainedTemplate:
    """The prompt template training/<name> learns (`clarify dvc-stages` checks a role served by it against its
    group's prompts; imported from here so the other stages' code deps stay without training/)."""
    return model_template(name, params)


def headlines(base: Path) -> list[tuple[str, pl.DataFrame | None]]:
    return [("trained models (one row per model)", pick(_models(base), ["model", "status"],
                                                        lambda c: c in TRAINING_METRICS))]


def metrics(base: Path) -> dict | None:
    """Per trained model: rows, steps, final loss, wall time, tokens/s; and the re-ranker evaluation's MRR / nDCG."""
    out: dict = {}
    models = _models(base)
    if models is not None:
        out.update(nest(models.filter(pl.col("status") != "skipped_no_data").to_dicts(), ["model"],
                        list(TRAINING_METRICS)))
    ev = read_asset(base, "training", "reranker_eval")
    if ev is not None and not ev.is_empty():
        cols = [c for c in ev.columns if c == "mrr" or c.startswith("ndcg_at_")]
        out["reranker_eval"] = nest(ev.to_dicts(), ["ranker"], ["n_queries", *cols])
    return out or None


GROUP = GroupSpec(
    name="training",
    build=assets.build,
    params=("training", "embedder", "intents.sweep_train", "intents.sweep_percentiles", "intents.require_correct",
            "retrieval.ks", "facets.log_demos", "facets.seed",
            # the double-turn DPO chain asks the SFT model, the simulated users, the answerer and the judge
            "llm", "double_turn", "evaluation.trained_baseline"),
    headlines=headlines,
    metrics=("training", metrics),
    doc="LoRA SFT / DPO models (ClariLM, FM-LOG, double-turn, intents) and the fine-tuned re-ranker",
)
