"""ClarifyMT-Bench metrics (§3.2, §5): clarification accuracy by turn / persona / subtype, method comparison."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from dagster_project.core.shared.metrics import decision_macro_f1, paired_significance

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


EVALUATION_BREAKDOWNS: dict[str, list[str]] = {**BREAKDOWNS, "by_persona_turn": ["persona", "turn"]}


PERSONA_COLUMNS = ("precise", "partial_vague", "off_focus", "contradictory", "factually_wrong", "refusal")


def evaluation_tables(pred: pl.DataFrame) -> pl.DataFrame:
    """metric_tables per dataset x subject x method, plus persona x turn (Table 5 is its turn-2 slice)."""
    if "dataset" not in pred.columns:
        pred = pred.with_columns(dataset=pl.lit("clarifymt"))
    frames = []
    for name, keys in EVALUATION_BREAKDOWNS.items():
        t = clarification_metrics(pred, ["dataset", "subject", "method", *keys])
        frames.append(t.with_columns(pl.lit(name).alias("breakdown")))
    out = pl.concat(frames, how="diagonal_relaxed")
    for c, t in (("persona", pl.Utf8), ("subtype", pl.Utf8), ("turn", pl.Int64)):
        if c not in out.columns:
            out = out.with_columns(pl.lit(None, t).alias(c))
    return out.select("breakdown", "dataset", "subject", "method", "persona", "subtype", "turn",
                      "n", "accuracy", "under_clarification", "over_clarification", "invalid")


def persona_spread(accuracies: Sequence[float]) -> tuple[float, float]:
    """(Avg., Std.) over persona accuracies as in Tables 3/6: unweighted mean, population std (ddof=0)."""
    if not accuracies:
        return float("nan"), float("nan")
    a = np.asarray(accuracies, dtype=float)
    return float(a.mean()), float(a.std(ddof=0))


def _scope_summary(frame: pl.DataFrame) -> pl.DataFrame:
    keys = ["dataset", "subject", "method"]
    base = clarification_metrics(frame, keys).join(
        frame.group_by(keys).agg(pl.col("llm_calls").mean().alias("calls_per_turn")), on=keys, how="left")
    f1 = [{"dataset": d, "subject": s, "method": m,
           "macro_f1": decision_macro_f1(g["reference_action"].to_list(), g["action"].to_list())}
          for (d, s, m), g in frame.group_by(keys)]
    base = base.join(pl.DataFrame(f1, schema={**{k: pl.Utf8 for k in keys}, "macro_f1": pl.Float64}),
                     on=keys, how="left")
    by_p = clarification_metrics(frame.filter(pl.col("persona").is_in(PERSONA_COLUMNS)), [*keys, "persona"])
    rows = []
    for (d, s, m), g in by_p.group_by(keys):
        accs = dict(zip(g["persona"], g["accuracy"]))
        avg, std = persona_spread([accs[p] for p in PERSONA_COLUMNS if p in accs])
        rows.append({"dataset": d, "subject": s, "method": m, **{p: accs.get(p) for p in PERSONA_COLUMNS},
                     "persona_avg": avg, "persona_std": std})
    wide = pl.DataFrame(rows, schema={**{k: pl.Utf8 for k in keys}, **{p: pl.Float64 for p in PERSONA_COLUMNS},
                                      "persona_avg": pl.Float64, "persona_std": pl.Float64})
    return base.join(wide, on=keys, how="left")


def _significance(frame: pl.DataFrame, agent: str, alpha: float) -> pl.DataFrame:
    keys = ["dataset", "subject"]
    scored = frame.with_columns(correct=(pl.col("action") == pl.col("reference_action")).cast(pl.Int64))
    rows = []
    for (d, s), g in scored.group_by(keys):
        ref = g.filter(pl.col("method") == agent).select("dialogue_id", "turn", "persona", agent_ok="correct")
        if ref.is_empty():
            continue
        better_than: dict[str, list[str]] = {}
        for m in sorted(set(g["method"]) - {agent}):
            pair = ref.join(g.filter(pl.col("method") == m).select("dialogue_id", "turn", "correct"),
                            on=["dialogue_id", "turn"], how="inner")
            test = paired_significance(pair["agent_ok"].to_list(), pair["correct"].to_list())
            personas = []
            for p in PERSONA_COLUMNS:
                pp = pair.filter(pl.col("persona") == p)
                tp = paired_significance(pp["agent_ok"].to_list(), pp["correct"].to_list())
                if tp["mean_diff"] > 0 and tp["p_ttest"] < alpha:
                    personas.append(p)
            better_than[m] = personas
            rows.append({"dataset": d, "subject": s, "method": m, "reference_method": agent, "n_paired": test["n"],
                         "p_ttest": test["p_ttest"], "p_mcnemar": test["p_mcnemar"],
                         "agent_better_personas": personas})
        everywhere = [p for p in PERSONA_COLUMNS if better_than and all(p in v for v in better_than.values())]
        rows.append({"dataset": d, "subject": s, "method": agent, "reference_method": None, "n_paired": None,
                     "p_ttest": None, "p_mcnemar": None, "agent_better_personas": everywhere})
    return pl.DataFrame(rows, schema={"dataset": pl.Utf8, "subject": pl.Utf8, "method": pl.Utf8,
                                      "reference_method": pl.Utf8, "n_paired": pl.Int64, "p_ttest": pl.Float64,
                                      "p_mcnemar": pl.Float64, "agent_better_personas": pl.List(pl.Utf8)})


def method_comparison(pred: pl.DataFrame, agent: str = "clarify_agent", comparison_turn: int = 2,
                      alpha: float = 0.05, quality: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per dataset x subject x method x scope (turn <comparison_turn> as in Table 5, and all turns).

    Accuracy overall and per persona (P, PV, OF, CT, FA, RF), the personas' Avg. and Std. (Table 6),
    under-/over-clarification, invalid share, ask/answer macro-F1, LLM calls per turn, and paired tests of
    ``agent`` against each other method on the same turns (p_ttest, p_mcnemar). ``agent_better_personas``
    lists the personas where the agent is significantly better (p_ttest < alpha) than that method; on the
    agent's own row, the personas where it beats every other method. ``quality`` (per dataset x subject x
    method: judge / token-F1 / BERTScore / win rates) is joined on when given.
    """
    if "dataset" not in pred.columns:
        pred = pred.with_columns(dataset=pl.lit("clarifymt"))
    if "llm_calls" not in pred.columns:
        pred = pred.with_columns(llm_calls=pl.lit(None, pl.Int64))
    frames = []
    for scope, frame in ((f"turn_{comparison_turn}", pred.filter(pl.col("turn") == comparison_turn)),
                         ("all_turns", pred)):
        if frame.is_empty():
            continue
        summary = _scope_summary(frame).join(_significance(frame, agent, alpha),
                                             on=["dataset", "subject", "method"], how="left")
        frames.append(summary.with_columns(scope=pl.lit(scope)))
    keys = ["dataset", "subject", "method"]
    if not frames:
        return pl.DataFrame()
    out = pl.concat(frames, how="diagonal_relaxed")
    if quality is not None and not quality.is_empty():
        out = out.join(quality, on=keys, how="left")
    first = ["dataset", "subject", "method", "scope", "n", "accuracy", *PERSONA_COLUMNS, "persona_avg",
             "persona_std", "under_clarification", "over_clarification", "invalid", "macro_f1", "calls_per_turn"]
    return out.select(*first, *[c for c in out.columns if c not in first]).sort("dataset", "subject", "scope",
                                                                                "method")
