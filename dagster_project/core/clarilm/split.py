"""ClariLM §4.2 "Our-test": a seeded, query-disjoint train/test split of the selected question set Q.

Questions that read the same after normalisation (case, punctuation, spacing) share one `query_key` and
always land in the same split, so no test query reaches training under another id. Only `train` rows are
exported for SFT/DPO; the `test` rows become the held-out evaluation set with CoTAP's label as reference.
"""

from __future__ import annotations

import random

import polars as pl

from dagster_project.core.shared.dedup import normalise

SPLITS = ("train", "test")


def assign_split(questions: pl.DataFrame, test_fraction: float, seed: int) -> pl.DataFrame:
    """Adds `query_key` and `split` (train / test for selected rows, null for the rest).

    round(test_fraction x distinct selected keys) keys, drawn with random.Random(seed) from the sorted keys,
    are test; a reordering of the input does not change the split."""
    keys = [normalise(q) for q in questions["question"]]
    out = questions.with_columns(query_key=pl.Series(keys, dtype=pl.Utf8))
    pool = sorted(set(out.filter(pl.col("selected"))["query_key"]))
    test = set(random.Random(seed).sample(pool, round(test_fraction * len(pool))))
    return out.with_columns(
        split=pl.when(~pl.col("selected")).then(pl.lit(None, pl.Utf8))
        .when(pl.col("query_key").is_in(list(test))).then(pl.lit("test")).otherwise(pl.lit("train")))


def train_only(rows: pl.DataFrame) -> pl.DataFrame:
    """The rows that may be exported for training (split train)."""
    return rows.filter(pl.col("split") == "train")
