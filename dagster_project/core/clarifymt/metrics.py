"""ClarifyMT-Bench metrics (§3.2, §5): clarification accuracy by turn / persona / subtype, method comparison.

Independent units. Turn 1 of the six persona dialogues of a query is the same prompt (the query alone): in any
group that holds several of them, each copy weighs 1/k, so a query's turn 1 counts once ("over all turns" tables
are per independent turn, not per dialogue row). Turns of one query are dependent: every CI and paired test is
clustered by query (`clustered_accuracy`, `clustered_paired_test` in core/shared/metrics.py). `n` is the number of
evaluated rows, `n_independent` the weighted turn count, `n_queries` the clusters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from dagster_project.io.status import Status
from dagster_project.core.shared.metrics import (
    clustered_accuracy,
    clustered_paired_test,
    clarify_f1,
    decision_macro_f1,
    holm,
)

EVALUATED = (Status.OK, Status.PARSE_ERROR)  # invalid replies count as wrong; llm_error / input_error rows are excluded
SHARES = ["accuracy", "under_clarification", "over_clarification", "invalid", "not_a_question"]
METRIC_COLUMNS = ["n", "accuracy", "accuracy_ci_low", "accuracy_ci_high", *SHARES[1:], "protocol_compliance",
                  "question_share", "llm_errors", "input_errors", "n_independent", "n_queries"]
BREAKDOWNS: dict[str, list[str]] = {
    "overall": [],
    "by_turn": ["turn"],
    "by_persona": ["persona"],
    "by_subtype": ["subtype"],
    "by_subtype_turn": ["subtype", "turn"],
}


def scored(pred: pl.DataFrame, clarify_must_be_question: bool = False) -> pl.DataFrame:
    """Every row with `evaluated` (ok / parse_error), `correct` and its `cluster` (the query; the dialogue where
    no query_id is known). By default (the paper's action-only accuracy) a clarify reply that is no question is
    only flagged (question_share, not_a_question); with clarify_must_be_question it counts wrong."""
    defaults = {"status": pl.lit(Status.OK), "is_question": pl.lit(None, pl.Boolean),
                "protocol_ok": pl.lit(None, pl.Float64), "llm_calls": pl.lit(None, pl.Int64),
                "query_id": pl.lit(None, pl.Utf8), "dataset": pl.lit("clarifymt")}
    pred = pred.with_columns(**{c: e for c, e in defaults.items() if c not in pred.columns})
    fallback = pl.col("dialogue_id").cast(pl.Utf8) if "dialogue_id" in pred.columns else \
        pl.int_range(pl.len()).cast(pl.Utf8)
    pred = pred.with_columns(cluster=pl.format("{}/{}", pl.col("dataset"), pl.coalesce(pl.col("query_id"), fallback)))
    act, ref = pl.col("action"), pl.col("reference_action")
    non_question = (act == "clarify") & pl.col("is_question").not_()  # null (not checked) stays null
    wrong_form = (non_question & pl.lit(clarify_must_be_question)).fill_null(False)
    return pred.with_columns(evaluated=pl.col("status").is_in(EVALUATED), non_question=wrong_form,
                             correct=(act == ref) & ~wrong_form)


def weighted(f: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """`weight` per scored row: 0 unless evaluated; 1/k for each of the k evaluated turn-1 rows one query has in a
    group of `keys` (the same prompt, evaluated once and counted once); 1 otherwise."""
    shared = pl.col("evaluated") & (pl.col("turn") == 1) if "turn" in f.columns else pl.lit(False)
    copies = pl.len().over([*keys, "cluster", "_shared"]) if keys else pl.len().over(["cluster", "_shared"])
    return f.with_columns(_shared=shared).with_columns(
        weight=pl.when(~pl.col("evaluated")).then(0.0).when(pl.col("_shared")).then(1.0 / copies).otherwise(1.0)
    ).drop("_shared")


def _wmean(expr: pl.Expr, where: pl.Expr) -> pl.Expr:
    """Weighted mean of expr over the rows where `where` holds (null where their weight sums to 0)."""
    w = pl.col("weight").filter(where)
    return ((expr.cast(pl.Float64) * pl.col("weight")).filter(where).sum() / w.sum())


def clarification_metrics(pred: pl.DataFrame, keys: list[str], clarify_must_be_question: bool = False) -> pl.DataFrame:
    """Accuracy and error shares per group over its evaluated turns; the five shares of each row sum to 1.

    accuracy = predicted action == reference (the paper's action-only accuracy; see `scored` for the question-form
    option); under_clarification = answered where the reference is clarify; over_clarification = asked where the
    reference is answer; invalid = no protocol prefix (counted wrong, as in the paper); not_a_question = clarify
    where the reference is clarify, but the reply is no question. Every share weighs a query's shared turn 1 once
    (`weighted`). n = evaluated rows, n_independent = weighted turns, n_queries = clusters; the 95% CI of the
    accuracy is clustered by query (`clustered_accuracy`); a group whose rows all failed (llm_errors /
    input_errors) stays with n = 0. protocol_compliance: mean share of the group's replies that followed the
    reply format; question_share: share of clarify replies that are questions.
    """
    f = weighted(scored(pred, clarify_must_be_question), keys)
    ev, ref, act = pl.col("evaluated"), pl.col("reference_action"), pl.col("action")
    aggs = [
        ev.sum().cast(pl.Int64).alias("n"),
        _wmean(pl.col("correct"), ev).alias("accuracy"),
        _wmean((act == "answer") & (ref == "clarify"), ev).alias("under_clarification"),
        _wmean((act == "clarify") & (ref == "answer"), ev).alias("over_clarification"),
        _wmean(act == "invalid", ev).alias("invalid"),
        _wmean(pl.col("non_question") & (ref == "clarify"), ev).alias("not_a_question"),
        _wmean(pl.col("protocol_ok"), ev & pl.col("protocol_ok").is_not_null()).alias("protocol_compliance"),
        _wmean(pl.col("is_question"), ev & (act == "clarify") & pl.col("is_question").is_not_null())
        .alias("question_share"),
        (pl.col("status") == Status.LLM_ERROR).sum().cast(pl.Int64).alias("llm_errors"),
        (pl.col("status") == Status.INPUT_ERROR).sum().cast(pl.Int64).alias("input_errors"),
        pl.col("weight").sum().alias("n_independent"),
        pl.col("correct").filter(ev).alias("_correct"), pl.col("weight").filter(ev).alias("_weight"),
        pl.col("cluster").filter(ev).alias("_cluster"),
    ]
    by = keys or ["_all"]  # one group for the whole frame: the same list aggregations either way
    out = f.with_columns(_all=pl.lit(0)).group_by(by).agg(aggs).sort(by, nulls_last=True)
    ci = [clustered_accuracy(c.to_list(), w.to_list(), g.to_list())
          for c, w, g in zip(out["_correct"], out["_weight"], out["_cluster"])]
    out = out.with_columns(accuracy_ci_low=pl.Series([c["ci_low"] for c in ci], dtype=pl.Float64),
                           accuracy_ci_high=pl.Series([c["ci_high"] for c in ci], dtype=pl.Float64),
                           n_queries=pl.Series([c["n_clusters"] for c in ci], dtype=pl.Int64)).fill_nan(None)
    return out.select(*keys, *METRIC_COLUMNS)


LABELS = {"persona": pl.Utf8, "subtype": pl.Utf8, "turn": pl.Int64}


def _long(pred: pl.DataFrame, keys: list[str], breakdowns: dict[str, list[str]], must_ask: bool) -> pl.DataFrame:
    frames = [clarification_metrics(pred, [*keys, *by], must_ask).with_columns(breakdown=pl.lit(name))
              for name, by in breakdowns.items()]
    out = pl.concat(frames, how="diagonal_relaxed")
    out = out.with_columns(**{c: pl.lit(None, t) for c, t in LABELS.items() if c not in out.columns})
    return out.select("breakdown", *keys, *LABELS, *METRIC_COLUMNS)


def metric_tables(pred: pl.DataFrame, clarify_must_be_question: bool = False) -> pl.DataFrame:
    """All breakdowns, per subject x method, as one long table (a `breakdown` column names each)."""
    return _long(pred, ["subject", "method"], BREAKDOWNS, clarify_must_be_question)


EVALUATION_BREAKDOWNS: dict[str, list[str]] = {**BREAKDOWNS, "by_persona_turn": ["persona", "turn"]}


PERSONA_COLUMNS = ("precise", "partial_vague", "off_focus", "contradictory", "factually_wrong", "refusal")


def evaluation_tables(pred: pl.DataFrame, clarify_must_be_question: bool = False) -> pl.DataFrame:
    """metric_tables per dataset x subject x method, plus persona x turn (Table 5 is its turn-2 slice).

    Takes every prediction row: a method whose rows all failed keeps its rows with n = 0 and its error counts.
    """
    if "dataset" not in pred.columns:
        pred = pred.with_columns(dataset=pl.lit("clarifymt"))
    return _long(pred, ["dataset", "subject", "method"], EVALUATION_BREAKDOWNS, clarify_must_be_question)


def persona_spread(accuracies: Sequence[float]) -> tuple[float, float]:
    """(Avg., Std.) over persona accuracies as in Tables 3/6: unweighted mean, population std (ddof=0)."""
    if not accuracies:
        return float("nan"), float("nan")
    a = np.asarray(accuracies, dtype=float)
    return float(a.mean()), float(a.std(ddof=0))


KEYS = ["dataset", "subject", "method"]
BASELINES = ("base", "majority_vote", "cot", "intent_sim", "at_cot")
"""The paper's training-free baselines (§6): the family ClarifyAgent's significance is tested against."""


def _scope_summary(frame: pl.DataFrame, must_ask: bool) -> pl.DataFrame:
    base = clarification_metrics(frame, KEYS, must_ask).join(
        frame.group_by(KEYS).agg(pl.col("llm_calls").filter(pl.col("status") != Status.INPUT_ERROR).mean()
                                 .alias("calls_per_turn")), on=KEYS, how="left")
    if "truncated_replies" in frame.columns:  # share of the generations that stopped at max_tokens
        cut = frame.group_by(KEYS).agg((pl.col("truncated_replies").sum() / pl.col("llm_calls").sum())
                                       .cast(pl.Float64).alias("truncated_share"))
        base = base.join(cut, on=KEYS, how="left").with_columns(pl.col("truncated_share").fill_nan(None))
    else:  # predictions from before the column: unmeasured, not zero
        base = base.with_columns(truncated_share=pl.lit(None, pl.Float64))
    done = weighted(scored(frame, must_ask), KEYS).filter(pl.col("evaluated")).with_columns(
        action=pl.when(pl.col("non_question")).then(pl.lit("invalid")).otherwise(pl.col("action")))
    f1 = [{"dataset": d, "subject": s, "method": m,
           "macro_f1": decision_macro_f1(g["reference_action"].to_list(), g["action"].to_list(),
                                         g["weight"].to_list()),
           "clarify_f1": clarify_f1(g["reference_action"].to_list(), g["action"].to_list(), g["weight"].to_list())}
          for (d, s, m), g in done.group_by(KEYS)]
    base = base.join(pl.DataFrame(f1, schema={**{k: pl.Utf8 for k in KEYS}, "macro_f1": pl.Float64,
                                              "clarify_f1": pl.Float64}), on=KEYS, how="left")
    by_p = clarification_metrics(frame.filter(pl.col("persona").is_in(PERSONA_COLUMNS)), [*KEYS, "persona"], must_ask)
    rows = []
    for (d, s, m), g in by_p.group_by(KEYS):
        accs = {p: a for p, a, n in zip(g["persona"], g["accuracy"], g["n"]) if n}
        counts = dict(zip(g["persona"], g["n"]))
        avg, std = persona_spread([accs[p] for p in PERSONA_COLUMNS if p in accs])
        rows.append({"dataset": d, "subject": s, "method": m, **{p: accs.get(p) for p in PERSONA_COLUMNS},
                     **{f"{p}_n": counts.get(p, 0) for p in PERSONA_COLUMNS}, "persona_avg": avg, "persona_std": std})
    wide = pl.DataFrame(rows, schema={**{k: pl.Utf8 for k in KEYS}, **{p: pl.Float64 for p in PERSONA_COLUMNS},
                                      **{f"{p}_n": pl.Int64 for p in PERSONA_COLUMNS},
                                      "persona_avg": pl.Float64, "persona_std": pl.Float64}).fill_nan(None)
    return base.join(wide, on=KEYS, how="left")


SIGNIFICANCE_SCHEMA = {
    "dataset": pl.Utf8, "subject": pl.Utf8, "method": pl.Utf8, "reference_method": pl.Utf8, "n_paired": pl.Int64,
    "n_paired_queries": pl.Int64, "diff_vs_reference": pl.Float64, "diff_ci_low": pl.Float64,
    "diff_ci_high": pl.Float64, "test": pl.Utf8, "p_value": pl.Float64, "p_holm": pl.Float64,
    "correction": pl.Utf8, "p_ttest": pl.Float64, "p_sign_flip": pl.Float64, "significant": pl.Boolean,
    "agent_better_personas": pl.List(pl.Utf8),
}


def _paired(done: pl.DataFrame, agent: str, method: str, persona: str | None = None) -> dict[str, Any]:
    """The agent's and `method`'s correctness on the turns both evaluated, weighted as `weighted` does over the
    pairs (a query's shared turn 1 once), each pair in its query's cluster."""
    mine = done.filter(pl.col("method") == agent)
    if persona is not None:
        mine = mine.filter(pl.col("persona") == persona)
    pair = mine.select("dialogue_id", "turn", "cluster", "evaluated", agent_ok="correct").join(
        done.filter(pl.col("method") == method).select("dialogue_id", "turn", "correct"),
        on=["dialogue_id", "turn"], how="inner")
    pair = weighted(pair, [])
    return {"a": pair["agent_ok"].cast(pl.Float64).to_list(), "b": pair["correct"].cast(pl.Float64).to_list(),
            "w": pair["weight"].to_list(), "c": pair["cluster"].to_list()}


def _test(pairs: dict[str, Any], ttest_min_n: int, seed: int) -> dict[str, Any]:
    return clustered_paired_test(pairs["a"], pairs["b"], pairs["w"], pairs["c"], ttest_min_n, seed=seed)


def _significance(frame: pl.DataFrame, agent: str, alpha: float, min_n: int, ttest_min_n: int, must_ask: bool,
                  baselines: Sequence[str], seed: int) -> pl.DataFrame:
    """Paired tests of `agent` against each other method on the turns both evaluated, clustered by query.

    Only the baselines present form the tested family: their p-values are Holm-adjusted within each dataset x
    subject (and, separately, the persona x baseline cells); a difference is significant when the adjusted p
    is below alpha with at least `min_n` paired queries. Other methods (ablations, variants) get the difference,
    its CI and an unadjusted p, never a significance mark.
    """
    done = scored(frame, must_ask).filter(pl.col("evaluated")).with_columns(pl.col("correct").cast(pl.Int64))
    rows = []
    for (d, s), g in frame.group_by(["dataset", "subject"]):
        if agent not in set(g["method"]):
            continue
        ok = done.filter((pl.col("dataset") == d) & (pl.col("subject") == s))
        others = sorted(set(g["method"]) - {agent})
        family = [m for m in others if m in baselines]
        tests = {m: _test(_paired(ok, agent, m), ttest_min_n, seed) for m in others}
        adjusted = dict(zip(family, holm([tests[m]["p"] for m in family])))
        cells = [(m, p) for m in family for p in PERSONA_COLUMNS]
        cell_tests = {c: _test(_paired(ok, agent, c[0], c[1]), ttest_min_n, seed) for c in cells}
        cell_adj = dict(zip(cells, holm([cell_tests[c]["p"] for c in cells])))
        better = {m: [p for p in PERSONA_COLUMNS if cell_tests[(m, p)]["n_clusters"] >= min_n
                      and cell_tests[(m, p)]["mean_diff"] > 0 and cell_adj[(m, p)] < alpha] for m in family}
        correction = f"holm over {len(family)} baseline(s) of {d} x {s}"
        for m in others:
            t = tests[m]
            in_family = m in family
            p_adj = adjusted.get(m)
            rows.append({"dataset": d, "subject": s, "method": m, "reference_method": agent, "n_paired": t["n"],
                         "n_paired_queries": t["n_clusters"],
                         "diff_vs_reference": 0.0 - t["mean_diff"] if t["n"] else None,
                         "diff_ci_low": -t["diff_ci_high"], "diff_ci_high": -t["diff_ci_low"],
                         "test": t["test"], "p_value": t["p"], "p_holm": p_adj,
                         "correction": correction if in_family else "not tested (not a baseline)",
                         "p_ttest": t["p_ttest"], "p_sign_flip": t["p_sign_flip"],
                         "significant": bool(t["n_clusters"] >= min_n and p_adj is not None and p_adj < alpha)
                         if in_family else None,
                         "agent_better_personas": better.get(m)})
        everywhere = [p for p in PERSONA_COLUMNS if family and all(p in better[m] for m in family)]
        rows.append({"dataset": d, "subject": s, "method": agent, "agent_better_personas": everywhere,
                     "correction": f"holm over {len(cells)} persona x baseline cell(s) of {d} x {s}"})
    return pl.DataFrame(rows, schema=SIGNIFICANCE_SCHEMA).fill_nan(None)


def method_comparison(pred: pl.DataFrame, agent: str = "clarify_agent", comparison_turn: int = 2,
                      alpha: float = 0.05, quality: pl.DataFrame | None = None, min_n: int = 10,
                      ttest_min_n: int = 30, clarify_must_be_question: bool = False,
                      baselines: Sequence[str] = BASELINES, channel: str | None = None,
                      seed: int = 0) -> pl.DataFrame:
    """One row per dataset x subject x method x scope (turn <comparison_turn> as in Table 5, and all turns, a
    query's shared turn 1 counted once).

    Takes every prediction row (a method whose rows all failed stays, with n = 0 and its error counts).
    Accuracy with n, n_independent, n_queries and a 95% CI clustered by query, per persona (P, PV, OF, CT, FA, RF,
    each with its n), the personas' Avg. and Std. (Table 6), under-/over-clarification, invalid and
    not-a-question shares, protocol compliance, question share, ask/answer macro-F1, LLM calls per turn, the
    share of generations cut at max_tokens (`truncated_share`, where predictions say), the decision channel
    (`decision_channel`: free_text or structured, one per run), and paired tests of each method against
    ``agent`` on the same turns (`_significance`: clustered by query, the baselines only, Holm-adjusted):
    diff_vs_reference (method - agent accuracy) with a 95% CI, the test used (cluster-robust t-test as in the
    paper where defined and at least ttest_min_n queries, else the sign-flip permutation test), p_value, p_holm,
    `correction`, and `significant`. ``agent_better_personas`` lists the personas where the agent is
    significantly better than that baseline; on the agent's own row, the personas where it beats every
    baseline. ``quality`` (per dataset x subject x method) is joined on when given.
    """
    if "dataset" not in pred.columns:
        pred = pred.with_columns(dataset=pl.lit("clarifymt"))
    if "status" not in pred.columns:
        pred = pred.with_columns(status=pl.lit(Status.OK))
    if "llm_calls" not in pred.columns:
        pred = pred.with_columns(llm_calls=pl.lit(None, pl.Int64))
    frames = []
    for scope, frame in ((f"turn_{comparison_turn}", pred.filter(pl.col("turn") == comparison_turn)),
                         ("all_turns", pred)):
        if frame.is_empty():
            continue
        sig = _significance(frame, agent, alpha, min_n, ttest_min_n, clarify_must_be_question, baselines, seed)
        summary = _scope_summary(frame, clarify_must_be_question).join(sig, on=KEYS, how="left")
        frames.append(summary.with_columns(scope=pl.lit(scope)))
    if not frames:
        return pl.DataFrame()
    out = pl.concat(frames, how="diagonal_relaxed").with_columns(decision_channel=pl.lit(channel, pl.Utf8))
    if quality is not None and not quality.is_empty():
        out = out.join(quality, on=KEYS, how="left")
    first = [*KEYS, "scope", "decision_channel", *METRIC_COLUMNS[:4], *PERSONA_COLUMNS, "persona_avg", "persona_std",
             *METRIC_COLUMNS[4:], "clarify_f1", "macro_f1", "calls_per_turn"]
    return out.select(*first, *[c for c in out.columns if c not in first]).sort("dataset", "subject", "scope",
                                                                                "method")
