"""Table 1 with trained subjects: the paired comparisons behind its verdicts. A trained model against another (DPO on
double-turn vs single-turn labels: the paper's headline) or against the untrained base, on the same evaluation
queries: answer-set F1 of one system (paired bootstrap) and the clarify-or-answer decision (exact McNemar)."""

from __future__ import annotations

from typing import Any

import polars as pl

from dagster_project.core.double_turn.answer_set import EVALUATED
from dagster_project.core.double_turn.metrics import paired_bootstrap_p
from dagster_project.core.shared.metrics import paired_significance

COMPARISON_SCHEMA = {"subject": pl.Utf8, "reference": pl.Utf8, "system": pl.Utf8, "metric": pl.Utf8,
                     "n_paired": pl.Int64, "n_errors": pl.Int64, "value": pl.Float64, "ref_value": pl.Float64,
                     "diff": pl.Float64, "p_value": pl.Float64, "test": pl.Utf8}


def decision_correct(interactions: pl.DataFrame, subject: str) -> dict[str, int]:
    """Per query with all three turn-2 systems evaluated: 1 when Clarify-or-Direct decided right (answered an
    unambiguous query its greedy direct answer gets right, or asked otherwise: Table 4's DA accuracy), else 0."""
    ev = interactions.filter((pl.col("subject") == subject) & pl.col("status").is_in(EVALUATED))
    wide: dict[str, dict[str, dict[str, Any]]] = {}
    for r in ev.filter(pl.col("system").is_in(["direct_greedy", "clarify_or_direct"])).iter_rows(named=True):
        wide.setdefault(r["query_id"], {})[r["system"]] = r
    out = {}
    for q, w in wide.items():
        if len(w) == 2:
            should = not w["direct_greedy"]["is_ambiguous"] and w["direct_greedy"]["f1"] == 1.0
            out[q] = int((w["clarify_or_direct"]["action"] == "answer") == should)
    return out


def _f1(interactions: pl.DataFrame, subject: str, system: str) -> tuple[dict[str, float], int]:
    """F1 per evaluated query of one subject x system, and how many of its rows failed (LLM errors)."""
    rows = interactions.filter((pl.col("subject") == subject) & (pl.col("system") == system))
    ok = rows.filter(pl.col("status").is_in(EVALUATED))
    return dict(zip(ok["query_id"], ok["f1"], strict=True)), rows.height - ok.height


def compare(interactions: pl.DataFrame, subject: str, reference: str, system: str, samples: int,
            seed: int) -> list[dict[str, Any]]:
    """Two rows (answer-set F1 of `system`, DA accuracy) for subject vs reference on the queries both evaluated;
    rows lost to LLM errors on either side are counted in n_errors, never in n_paired."""
    mine, err_a = _f1(interactions, subject, system)
    ref, err_b = _f1(interactions, reference, system)
    common = sorted(set(mine) & set(ref))
    a, b = [mine[q] for q in common], [ref[q] for q in common]
    f1 = {"subject": subject, "reference": reference, "system": system, "metric": "f1_total",
          "n_paired": len(common), "n_errors": err_a + err_b,
          "value": sum(a) / len(a) if a else None, "ref_value": sum(b) / len(b) if b else None,
          "diff": (sum(a) - sum(b)) / len(a) if a else None,
          "p_value": paired_bootstrap_p(a, b, samples, seed) if a else None, "test": "paired_bootstrap"}
    da_a, da_b = decision_correct(interactions, subject), decision_correct(interactions, reference)
    both = sorted(set(da_a) & set(da_b))
    test = paired_significance([da_a[q] for q in both], [da_b[q] for q in both], ttest_min_n=10**9)
    n = len(both)
    da = {"subject": subject, "reference": reference, "system": "clarify_or_direct", "metric": "da_accuracy",
          "n_paired": n, "n_errors": err_a + err_b,
          "value": sum(da_a[q] for q in both) / n if n else None,
          "ref_value": sum(da_b[q] for q in both) / n if n else None,
          "diff": float(test["mean_diff"]) if n else None, "p_value": float(test["p"]) if n else None,
          "test": "mcnemar_exact"}
    return [f1, da]


def comparisons(interactions: pl.DataFrame, pairs: list[tuple[str, str]], system: str, samples: int,
                seed: int) -> pl.DataFrame:
    """compare() for every (subject, reference) pair whose two sides were evaluated."""
    present = set(interactions["subject"].unique().to_list()) if interactions.height else set()
    rows = [r for s, ref in pairs if {s, ref} <= present for r in compare(interactions, s, ref, system, samples, seed)]
    return pl.DataFrame(rows, schema=COMPARISON_SCHEMA)
