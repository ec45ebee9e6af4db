"""Tables 2, 4 and 7 with trained subjects: the tuned classifier (and each sweep model) beside the untuned base, both
served in the template the model was trained on, and the prompted subjects of intents/intent_eval; plus the paired
difference of each tuned model and the base on the same test conversations."""

from __future__ import annotations

from typing import Any

import polars as pl

from dagster_project.io.status import Status
from dagster_project.core.intents.simulation import SCORED_OUTCOMES
from dagster_project.core.shared.metrics import paired_significance

# metric -> the conversation kinds whose final prediction it scores (Table 2: unambiguous; Table 7: OOD)
PAIRED_METRICS = {"ic_accuracy": ("unambiguous",), "ood_dropout_accuracy": ("ood_dropout",),
                  "ood_accuracy": ("ood",), "ambiguous_accuracy": ("ambiguous",)}
COMPARISON_SCHEMA = {"subject": pl.Utf8, "reference": pl.Utf8, "metric": pl.Utf8, "n_paired": pl.Int64,
                     "n_errors": pl.Int64, "diff": pl.Float64, "diff_ci_low": pl.Float64, "diff_ci_high": pl.Float64,
                     "test": pl.Utf8, "p_value": pl.Float64}


def _conversations(turns: pl.DataFrame, subject: str) -> pl.DataFrame:
    """One row per conversation of `subject`: the key it shares with every other subject, kind, correct, valid."""
    prefix = f"{subject}/test/"
    return (turns.filter(pl.col("subject") == subject)
            .group_by("conversation_id").agg(pl.col("kind").first(), pl.col("outcome").first())
            .with_columns(key=pl.col("conversation_id").str.strip_prefix(prefix),
                          correct=(pl.col("outcome") == "correct").cast(pl.Int64),
                          valid=pl.col("outcome").is_in(list(SCORED_OUTCOMES))))


def paired_comparisons(turns: pl.DataFrame, subjects: list[str], reference: str | None,
                       ttest_min_n: int = 30) -> pl.DataFrame:
    """Per tuned subject x metric: the paired difference in accuracy (subject - reference) over the test
    conversations both answered (same key), the test and its p; conversations that failed outside the assistant on
    either side (llm_error, user_error) are counted in n_errors, not in n_paired."""
    rows: list[dict[str, Any]] = []
    if reference is None or turns.is_empty():
        return pl.DataFrame(rows, schema=COMPARISON_SCHEMA)
    ref = _conversations(turns, reference)
    for subject in subjects:
        both = _conversations(turns, subject).join(ref.select("key", r_correct="correct", r_valid="valid"),
                                                   on="key", how="inner")
        for metric, kinds in PAIRED_METRICS.items():
            sel = both.filter(pl.col("kind").is_in(list(kinds)))
            ok = sel.filter(pl.col("valid") & pl.col("r_valid"))
            test = paired_significance(ok["correct"].to_list(), ok["r_correct"].to_list(), ttest_min_n)
            n = int(test["n"])
            rows.append({"subject": subject, "reference": reference, "metric": metric, "n_paired": n,
                         "n_errors": sel.height - ok.height, "diff": float(test["mean_diff"]) if n else None,
                         "diff_ci_low": test["diff_ci_low"] if n else None,
                         "diff_ci_high": test["diff_ci_high"] if n else None, "test": test["test"],
                         "p_value": float(test["p"]) if n else None})
    return pl.DataFrame(rows, schema=COMPARISON_SCHEMA).fill_nan(None)


def headline_table(prompted: pl.DataFrame, trained: pl.DataFrame, systems: dict[str, dict[str, Any]]) -> pl.DataFrame:
    """One table: the prompted subjects of intents/intent_eval (system `prompted`), then the untuned base and every
    tuned model evaluated here; `systems` gives each trained-side subject its system, training percentile, template,
    status (a model that could not be served keeps a row with its reason and no numbers) and, when the reference
    is not its training base served the same way, why (unfair_reference)."""
    meta = pl.DataFrame([{"subject": s, "unfair_reference": None, **v} for s, v in systems.items()],
                        schema={"subject": pl.Utf8, "system": pl.Utf8, "percentile": pl.Float64,
                                "template": pl.Utf8, "status": pl.Utf8, "reason": pl.Utf8,
                                "unfair_reference": pl.Utf8})
    ours = meta.join(trained, on="subject", how="left")
    theirs = prompted.with_columns(system=pl.lit("prompted"), percentile=pl.lit(None, pl.Float64),
                                   template=pl.lit("intents group prompt"), status=pl.lit(Status.OK),
                                   reason=pl.lit(None, pl.Utf8))
    out = pl.concat([theirs, ours], how="diagonal_relaxed")
    order = {"prompted": 0, "untuned_base": 1, "tuned": 2}
    return out.with_columns(_o=pl.col("system").replace_strict(order, default=3)).sort(
        "_o", "percentile", "subject", descending=[False, True, False], nulls_last=True).drop("_o")
