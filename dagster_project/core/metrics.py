"""Metric definitions from the papers, on plain tables (ClarifyMT-Bench §3.2 / §5 first)."""

from __future__ import annotations

import polars as pl
from sklearn.metrics import cohen_kappa_score

BREAKDOWNS: dict[str, list[str]] = {
    "overall": [],
    "by_turn": ["turn"],
    "by_persona": ["persona"],
    "by_subtype": ["subtype"],
    "by_subtype_turn": ["subtype", "turn"],
}


def clarification_metrics(pred: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Accuracy and error shares per group; the four shares of each row sum to 1.

    accuracy = predicted action == reference; under_clarification = answered where the reference is
    clarify; over_clarification = asked where the reference is answer; invalid = no protocol prefix
    (counted wrong, as in the paper). All four are shares of the group's evaluated turns.
    """
    ref, act = pl.col("reference_action"), pl.col("action")
    aggs = [
        pl.len().alias("n"),
        (act == ref).mean().alias("accuracy"),
        ((act == "answer") & (ref == "clarify")).mean().alias("under_clarification"),
        ((act == "clarify") & (ref == "answer")).mean().alias("over_clarification"),
        (act == "invalid").mean().alias("invalid"),
    ]
    if not keys:
        return pred.select(aggs)
    return pred.group_by(keys).agg(aggs).sort(keys)


def metric_tables(pred: pl.DataFrame) -> pl.DataFrame:
    """All breakdowns, per subject x method, as one long table (a `breakdown` column names each)."""
    frames = []
    for name, keys in BREAKDOWNS.items():
        t = clarification_metrics(pred, ["subject", "method", *keys])
        frames.append(t.with_columns(pl.lit(name).alias("breakdown")))
    out = pl.concat(frames, how="diagonal_relaxed")
    cols = ["breakdown", "subject", "method", "persona", "subtype", "turn",
            "n", "accuracy", "under_clarification", "over_clarification", "invalid"]
    for c, t in (("persona", pl.Utf8), ("subtype", pl.Utf8), ("turn", pl.Int64)):
        if c not in out.columns:
            out = out.with_columns(pl.lit(None, t).alias(c))
    return out.select(cols)


def cohen_kappa(labels_a: list[str], labels_b: list[str]) -> dict[str, float]:
    """Cohen's kappa and observed agreement P_o between two annotators."""
    if len(labels_a) != len(labels_b) or not labels_a:
        raise ValueError("two non-empty label lists of equal length are needed")
    po = sum(a == b for a, b in zip(labels_a, labels_b)) / len(labels_a)
    return {"kappa": float(cohen_kappa_score(labels_a, labels_b)), "observed_agreement": po, "n": len(labels_a)}
