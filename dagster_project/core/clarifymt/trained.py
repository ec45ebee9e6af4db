"""Trained models vs their reference subject (issue 18): one method, the same held-out turns, paired tests; and the
proof that those turns are held out (no evaluation query appears in any training export)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence

import polars as pl

from dagster_project.core.clarifymt.metrics import clarification_metrics, scored
from dagster_project.core.shared.metrics import decision_macro_f1, paired_significance

SIDE = ["n", "accuracy", "accuracy_ci_low", "accuracy_ci_high", "macro_f1", "protocol_compliance",
        "under_clarification", "over_clarification", "judge_score", "judge_n"]
SCHEMA = {"dataset": pl.Utf8, "subject": pl.Utf8, "reference": pl.Utf8, "method": pl.Utf8,
          **{c: pl.Int64 if c in ("n", "judge_n") else pl.Float64 for c in SIDE},
          **{f"ref_{c}": pl.Int64 if c in ("n", "judge_n") else pl.Float64 for c in SIDE},
          "n_paired": pl.Int64, "diff": pl.Float64, "diff_ci_low": pl.Float64, "diff_ci_high": pl.Float64,
          "test": pl.Utf8, "p_value": pl.Float64, "significant": pl.Boolean, "verdict": pl.Utf8}


def _side(done: pl.DataFrame, rows: pl.DataFrame, quality: pl.DataFrame | None, key: tuple[str, str, str],
          must_ask: bool) -> dict[str, float | int | None]:
    """One subject's numbers on its evaluated turns (accuracy with a Wilson CI, shares, macro-F1, judge score)."""
    m = clarification_metrics(rows, [], must_ask).row(0, named=True)
    acts = done.with_columns(action=pl.when(pl.col("non_question")).then(pl.lit("invalid")).otherwise(pl.col("action")))
    out = {c: m.get(c) for c in SIDE if c in m}
    out["macro_f1"] = decision_macro_f1(acts["reference_action"].to_list(), acts["action"].to_list()) if done.height else None
    q = quality.filter((pl.col("dataset") == key[0]) & (pl.col("subject") == key[1]) & (pl.col("method") == key[2])) \
        if quality is not None and not quality.is_empty() else None
    out["judge_score"] = q["judge_score"][0] if q is not None and q.height else None
    out["judge_n"] = int(q["judge_n"][0]) if q is not None and q.height else 0
    return out


def verdict(n_paired: int, diff: float | None, significant: bool, min_n: int) -> str:
    """Plain words for the paired result: improved / worse only when significant, else says it did not improve."""
    if not n_paired or diff is None:
        return "not compared (no turns evaluated by both)"
    if n_paired < min_n:
        return f"too few paired turns ({n_paired} < {min_n}) to tell; no improvement shown"
    if significant:
        return "improved" if diff > 0 else "worse"
    return "no significant difference: does not improve" if diff <= 0 else "higher, but not significantly: no improvement shown"


def trained_comparison(pred: pl.DataFrame, pairs: Sequence[tuple[str, str]], method: str = "base",
                       quality: pl.DataFrame | None = None, alpha: float = 0.05, min_n: int = 10,
                       ttest_min_n: int = 30, clarify_must_be_question: bool = True) -> pl.DataFrame:
    """One row per dataset x (subject, reference) pair, both evaluated with `method` over all turns: each side's n,
    accuracy with a Wilson 95% CI, macro-F1, protocol compliance, under-/over-clarification and judge score (where
    judged); the paired test on the turns both evaluated (exact McNemar below ttest_min_n, else the t-test) with
    the difference's 95% CI, and a verdict in words."""
    if pred.is_empty() or not pairs:
        return pl.DataFrame(schema=SCHEMA)
    f = scored(pred.filter(pl.col("method") == method), clarify_must_be_question)
    rows = []
    for dataset in sorted(f["dataset"].unique().to_list()):
        d = f.filter(pl.col("dataset") == dataset)
        for subject, reference in pairs:
            sides = {}
            for who in (subject, reference):
                all_rows = d.filter(pl.col("subject") == who)
                sides[who] = (all_rows, all_rows.filter(pl.col("evaluated")))
            if sides[subject][0].is_empty() or sides[reference][0].is_empty():
                continue
            a, b = sides[subject][1], sides[reference][1]
            pair = a.select("dialogue_id", "turn", s="correct").join(
                b.select("dialogue_id", "turn", r="correct"), on=["dialogue_id", "turn"], how="inner")
            test = paired_significance(pair["s"].cast(pl.Int64).to_list(), pair["r"].cast(pl.Int64).to_list(),
                                       ttest_min_n)
            n = int(test["n"])
            sig = bool(n >= min_n and test["p"] < alpha)
            mine = _side(a, sides[subject][0], quality, (dataset, subject, method), clarify_must_be_question)
            ref = _side(b, sides[reference][0], quality, (dataset, reference, method), clarify_must_be_question)
            diff = float(test["mean_diff"]) if n else None
            rows.append({"dataset": dataset, "subject": subject, "reference": reference, "method": method, **mine,
                         **{f"ref_{k}": v for k, v in ref.items()}, "n_paired": n, "diff": diff,
                         "diff_ci_low": test["diff_ci_low"] if n else None,
                         "diff_ci_high": test["diff_ci_high"] if n else None, "test": test["test"],
                         "p_value": test["p"] if n else None, "significant": sig,
                         "verdict": verdict(n, diff, sig, min_n)})
    return pl.DataFrame(rows, schema=SCHEMA).fill_nan(None)


def normalize_query(text: str) -> str:
    """Case, accents, punctuation and spacing folded away: 'What's  the time?' == 'whats the time'."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return " ".join(re.sub(r"[^\w\s]", "", text.lower()).split())


def user_texts(frame: pl.DataFrame) -> list[str]:
    """Every user message of a training export (message-list columns) plus its question / query columns; rows a
    `kept` column marks as not kept are not trained on and are skipped."""
    if "kept" in frame.columns:
        frame = frame.filter(pl.col("kept"))
    texts: list[str] = []
    for name, dtype in frame.schema.items():
        if isinstance(dtype, pl.List) and isinstance(dtype.inner, pl.Struct) \
                and {"role", "content"} <= {f.name for f in dtype.inner.fields}:
            msgs = frame.select(pl.col(name).explode().struct.unnest()).drop_nulls("role")
            texts += msgs.filter(pl.col("role") == "user")["content"].drop_nulls().to_list()
        elif name in ("question", "query") and dtype == pl.Utf8:
            texts += frame[name].drop_nulls().to_list()
    return texts


def query_overlap(eval_queries: Iterable[str], exports: dict[str, pl.DataFrame]) -> dict[str, int]:
    """Per training export: how many distinct evaluation queries (normalized) occur as one of its user messages."""
    wanted = {normalize_query(q) for q in eval_queries if q}
    wanted.discard("")
    return {name: len(wanted & {normalize_query(t) for t in user_texts(df)}) for name, df in exports.items()}
