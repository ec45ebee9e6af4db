"""ClarifyMT-Bench metrics (§3.2, §5): clarification accuracy by turn / persona / subtype, method comparison."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from dagster_project.core.shared.metrics import (
    accuracy_ci,
    decision_macro_f1,
    paired_significance,
)

EVALUATED = ("ok", "parse_error")  # invalid replies count as wrong; llm_error / input_error rows are excluded
SHARES = ["accuracy", "under_clarification", "over_clarification", "invalid", "not_a_question"]
METRIC_COLUMNS = ["n", "accuracy", "accuracy_ci_low", "accuracy_ci_high", *SHARES[1:], "protocol_compliance",
                  "question_share", "llm_errors", "input_errors"]
BREAKDOWNS: dict[str, list[str]] = {
    "overall": [],
    "by_turn": ["turn"],
    "by_persona": ["persona"],
    "by_subtype": ["subtype"],
    "by_subtype_turn": ["subtype", "turn"],
}


def scored(pred: pl.DataFrame, clarify_must_be_question: bool = True) -> pl.DataFrame:
    """Every row with `evaluated` (ok / parse_error) and `correct`; a clarify reply that is not a question
    (is_question false) is wrong when clarify_must_be_question, else only flagged (question_share)."""
    defaults = {"status": pl.lit("ok"), "is_question": pl.lit(None, pl.Boolean),
                "protocol_ok": pl.lit(None, pl.Float64), "llm_calls": pl.lit(None, pl.Int64)}
    pred = pred.with_columns(**{c: e for c, e in defaults.items() if c not in pred.columns})
    act, ref = pl.col("action"), pl.col("reference_action")
    non_question = (act == "clarify") & pl.col("is_question").not_()  # null (not checked) stays null
    wrong_form = (non_question & pl.lit(clarify_must_be_question)).fill_null(False)
    return pred.with_columns(evaluated=pl.col("status").is_in(EVALUATED), non_question=wrong_form,
                             correct=(act == ref) & ~wrong_form)


def clarification_metrics(pred: pl.DataFrame, keys: list[str], clarify_must_be_question: bool = True) -> pl.DataFrame:
    """Accuracy and error shares per group over its evaluated turns; the five shares of each row sum to 1.

    accuracy = predicted action == reference (a clarify reply must be a question, see `scored`);
    under_clarification = answered where the reference is clarify; over_clarification = asked where the
    reference is answer; invalid = no protocol prefix (counted wrong, as in the paper); not_a_question =
    clarify where the reference is clarify, but the reply is no question. n = evaluated turns, with a Wilson
    95% CI of the accuracy; a group whose rows all failed (llm_errors / input_errors) stays with n = 0.
    protocol_compliance: mean share of the group's replies that followed the reply format; question_share:
    share of clarify replies that are questions.
    """
    f = scored(pred, clarify_must_be_question)
    ev, ref, act = pl.col("evaluated"), pl.col("reference_action"), pl.col("action")
    aggs = [
        ev.sum().cast(pl.Int64).alias("n"),
        pl.col("correct").filter(ev).sum().cast(pl.Int64).alias("_correct"),
        pl.col("correct").filter(ev).mean().alias("accuracy"),
        ((act == "answer") & (ref == "clarify")).filter(ev).mean().alias("under_clarification"),
        ((act == "clarify") & (ref == "answer")).filter(ev).mean().alias("over_clarification"),
        (act == "invalid").filter(ev).mean().alias("invalid"),
        (pl.col("non_question") & (ref == "clarify")).filter(ev).mean().alias("not_a_question"),
        pl.col("protocol_ok").filter(ev).mean().alias("protocol_compliance"),
        pl.col("is_question").filter(ev & (act == "clarify")).mean().alias("question_share"),
        (pl.col("status") == "llm_error").sum().cast(pl.Int64).alias("llm_errors"),
        (pl.col("status") == "input_error").sum().cast(pl.Int64).alias("input_errors"),
    ]
    out = f.select(aggs) if not keys else f.group_by(keys).agg(aggs).sort(keys, nulls_last=True)
    ci = [accuracy_ci(k, n) for k, n in zip(out["_correct"], out["n"])]
    out = out.with_columns(accuracy_ci_low=pl.Series([c[0] for c in ci], dtype=pl.Float64),
                           accuracy_ci_high=pl.Series([c[1] for c in ci], dtype=pl.Float64)).fill_nan(None)
    return out.select(*keys, *METRIC_COLUMNS)


LABELS = {"persona": pl.Utf8, "subtype": pl.Utf8, "turn": pl.Int64}


def _long(pred: pl.DataFrame, keys: list[str], breakdowns: dict[str, list[str]], must_ask: bool) -> pl.DataFrame:
    frames = [clarification_metrics(pred, [*keys, *by], must_ask).with_columns(breakdown=pl.lit(name))
              for name, by in breakdowns.items()]
    out = pl.concat(frames, how="diagonal_relaxed")
    out = out.with_columns(**{c: pl.lit(None, t) for c, t in LABELS.items() if c not in out.columns})
    return out.select("breakdown", *keys, *LABELS, *METRIC_COLUMNS)


def metric_tables(pred: pl.DataFrame, clarify_must_be_question: bool = True) -> pl.DataFrame:
    """All breakdowns, per subject x method, as one long table (a `breakdown` column names each)."""
    return _long(pred, ["subject", "method"], BREAKDOWNS, clarify_must_be_question)


EVALUATION_BREAKDOWNS: dict[str, list[str]] = {**BREAKDOWNS, "by_persona_turn": ["persona", "turn"]}


PERSONA_COLUMNS = ("precise", "partial_vague", "off_focus", "contradictory", "factually_wrong", "refusal")


def evaluation_tables(pred: pl.DataFrame, clarify_must_be_question: bool = True) -> pl.DataFrame:
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


def _scope_summary(frame: pl.DataFrame, must_ask: bool) -> pl.DataFrame:
    base = clarification_metrics(frame, KEYS, must_ask).join(
        frame.group_by(KEYS).agg(pl.col("llm_calls").filter(pl.col("status") != "input_error").mean()
                                 .alias("calls_per_turn")), on=KEYS, how="left")
    done = scored(frame, must_ask).filter(pl.col("evaluated")).with_columns(
        action=pl.when(pl.col("non_question")).then(pl.lit("invalid")).otherwise(pl.col("action")))
    f1 = [{"dataset": d, "subject": s, "method": m,
           "macro_f1": decision_macro_f1(g["reference_action"].to_list(), g["action"].to_list())}
          for (d, s, m), g in done.group_by(KEYS)]
    base = base.join(pl.DataFrame(f1, schema={**{k: pl.Utf8 for k in KEYS}, "macro_f1": pl.Float64}),
                     on=KEYS, how="left")
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
    "diff_vs_reference": pl.Float64, "diff_ci_low": pl.Float64, "diff_ci_high": pl.Float64, "test": pl.Utf8,
    "p_value": pl.Float64, "p_ttest": pl.Float64, "p_mcnemar": pl.Float64, "significant": pl.Boolean,
    "agent_better_personas": pl.List(pl.Utf8),
}


def _significance(frame: pl.DataFrame, agent: str, alpha: float, min_n: int, ttest_min_n: int,
                  must_ask: bool) -> pl.DataFrame:
    """Paired tests of `agent` against every other method on the turns both evaluated (see paired_significance).

    A difference (or a persona cell) is significant only with at least `min_n` pairs and p < alpha.
    """
    done = scored(frame, must_ask).filter(pl.col("evaluated")).with_columns(pl.col("correct").cast(pl.Int64))
    rows = []
    for (d, s), g in frame.group_by(["dataset", "subject"]):
        ok = done.filter((pl.col("dataset") == d) & (pl.col("subject") == s))
        ref = ok.filter(pl.col("method") == agent).select("dialogue_id", "turn", "persona", agent_ok="correct")
        if agent not in set(g["method"]):
            continue
        better_than: dict[str, list[str]] = {}
        for m in sorted(set(g["method"]) - {agent}):
            pair = ref.join(ok.filter(pl.col("method") == m).select("dialogue_id", "turn", "correct"),
                            on=["dialogue_id", "turn"], how="inner")
            test = paired_significance(pair["agent_ok"].to_list(), pair["correct"].to_list(), ttest_min_n)
            personas = []
            for p in PERSONA_COLUMNS:
                pp = pair.filter(pl.col("persona") == p)
                tp = paired_significance(pp["agent_ok"].to_list(), pp["correct"].to_list(), ttest_min_n)
                if tp["n"] >= min_n and tp["mean_diff"] > 0 and tp["p"] < alpha:
                    personas.append(p)
            better_than[m] = personas
            rows.append({"dataset": d, "subject": s, "method": m, "reference_method": agent, "n_paired": test["n"],
                         "diff_vs_reference": 0.0 - test["mean_diff"] if test["n"] else None,
                         "diff_ci_low": -test["diff_ci_high"], "diff_ci_high": -test["diff_ci_low"],
                         "test": test["test"], "p_value": test["p"], "p_ttest": test["p_ttest"],
                         "p_mcnemar": test["p_mcnemar"],
                         "significant": bool(test["n"] >= min_n and test["p"] < alpha),
                         "agent_better_personas": personas})
        everywhere = [p for p in PERSONA_COLUMNS if better_than and all(p in v for v in better_than.values())]
        rows.append({"dataset": d, "subject": s, "method": agent, "agent_better_personas": everywhere})
    return pl.DataFrame(rows, schema=SIGNIFICANCE_SCHEMA).fill_nan(None)


def method_comparison(pred: pl.DataFrame, agent: str = "clarify_agent", comparison_turn: int = 2,
                      alpha: float = 0.05, quality: pl.DataFrame | None = None, min_n: int = 10,
                      ttest_min_n: int = 30, clarify_must_be_question: bool = True) -> pl.DataFrame:
    """One row per dataset x subject x method x scope (turn <comparison_turn> as in Table 5, and all turns).

    Takes every prediction row (a method whose rows all failed stays, with n = 0 and its error counts).
    Accuracy with n and a Wilson 95% CI, per persona (P, PV, OF, CT, FA, RF, each with its n), the personas'
    Avg. and Std. (Table 6), under-/over-clarification, invalid and not-a-question shares, protocol compliance,
    question share, ask/answer macro-F1, LLM calls per turn, and paired tests of each method against
    ``agent`` on the same turns: diff_vs_reference (method - agent accuracy) with a 95% CI, the test used
    (t-test as in the paper where defined and n >= ttest_min_n, else exact McNemar), p_value, and
    `significant` (p < alpha with at least min_n pairs). ``agent_better_personas`` lists the personas where
    the agent is significantly better than that method; on the agent's own row, the personas where it beats
    every other method. ``quality`` (per dataset x subject x method) is joined on when given.
    """
    if "dataset" not in pred.columns:
        pred = pred.with_columns(dataset=pl.lit("clarifymt"))
    if "status" not in pred.columns:
        pred = pred.with_columns(status=pl.lit("ok"))
    if "llm_calls" not in pred.columns:
        pred = pred.with_columns(llm_calls=pl.lit(None, pl.Int64))
    frames = []
    for scope, frame in ((f"turn_{comparison_turn}", pred.filter(pl.col("turn") == comparison_turn)),
                         ("all_turns", pred)):
        if frame.is_empty():
            continue
        sig = _significance(frame, agent, alpha, min_n, ttest_min_n, clarify_must_be_question)
        summary = _scope_summary(frame, clarify_must_be_question).join(sig, on=KEYS, how="left")
        frames.append(summary.with_columns(scope=pl.lit(scope)))
    if not frames:
        return pl.DataFrame()
    out = pl.concat(frames, how="diagonal_relaxed")
    if quality is not None and not quality.is_empty():
        out = out.join(quality, on=KEYS, how="left")
    first = [*KEYS, "scope", *METRIC_COLUMNS[:4], *PERSONA_COLUMNS, "persona_avg", "persona_std",
             *METRIC_COLUMNS[4:], "macro_f1", "calls_per_turn"]
    return out.select(*first, *[c for c in out.columns if c not in first]).sort("dataset", "subject", "scope",
                                                                                "method")
