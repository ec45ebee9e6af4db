"""The evaluation report's text: Markdown tables and sections (pure: tables in, text out). The charts are in
report_plots.py, the files (report.md, a self-contained report.html, the PNGs) in report_page.py."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from dagster_project.core.clarifymt.judge import pairwise_summary
from dagster_project.core.clarifymt.validation import ILLUSTRATIVE
from dagster_project.core.shared.tables import markdown_table
from dagster_project.core.shared.taxonomy import PERSONAS, SUBTYPES
from dagster_project.llm.task import Status

_PCT = ["accuracy", "accuracy_ci_low", "accuracy_ci_high", "under_clarification", "over_clarification", "invalid",
        "not_a_question", "protocol_compliance", "question_share"]
PERSONA_ABBR = {"precise": "P", "partial_vague": "PV", "off_focus": "OF", "contradictory": "CT",
                "factually_wrong": "FA", "refusal": "RF"}
SUBTYPE_ORDER = [s.key for s in SUBTYPES]


def persona_pivot(tables: pl.DataFrame) -> pl.DataFrame:
    """Paper Table 3 layout: one row per (dataset x) subject x method, accuracy per persona, then the average."""
    t = tables.filter(pl.col("breakdown") == "by_persona")
    if t.is_empty():
        return t
    index = [c for c in ("dataset", "subject", "method") if c in t.columns]
    wide = t.filter(pl.col("persona").is_not_null()).pivot(on="persona", index=index, values="accuracy")
    order = [p.key for p in PERSONAS if p.key in wide.columns]
    # the paper's Avg. is the unweighted mean of the persona columns
    return wide.select(*index, *order).with_columns(avg=pl.mean_horizontal(order))


def question_quality(judge_scores: pl.DataFrame) -> pl.DataFrame:
    """Per dataset x subject x method: judge score (0-5) on the sample; token-F1 and BERTScore-F1 as ClariLM §4.3
    averages them (every turn whose reference is a clarifying question, see judge.judge_scores), and the same two
    over only the turns where the method asked (`*_asked`)."""
    keys = ["dataset", "subject", "method"]
    if judge_scores.is_empty():
        return pl.DataFrame(schema={**{k: pl.Utf8 for k in keys}, "questions_asked": pl.UInt32,
                                    "judge_n": pl.UInt32, "judge_score": pl.Float64, "token_f1": pl.Float64,
                                    "bertscore_f1": pl.Float64, "token_f1_asked": pl.Float64,
                                    "bertscore_f1_asked": pl.Float64})
    asked = pl.col("asked")
    return judge_scores.group_by(keys).agg(
        asked.sum().cast(pl.UInt32).alias("questions_asked"),
        pl.col("score").is_not_null().sum().cast(pl.UInt32).alias("judge_n"),
        pl.col("score").mean().cast(pl.Float64).alias("judge_score"),
        pl.col("token_f1").mean().alias("token_f1"),
        pl.col("bertscore_f1").mean().alias("bertscore_f1"),
        pl.col("token_f1").filter(asked).mean().alias("token_f1_asked"),
        pl.col("bertscore_f1").filter(asked).mean().alias("bertscore_f1_asked"),
    ).sort(keys)


@dataclass(frozen=True)
class ReportInputs:
    metric_tables: pl.DataFrame
    method_comparison: pl.DataFrame
    judge_scores: pl.DataFrame
    pairwise: pl.DataFrame
    predictions: pl.DataFrame
    comparison_turn: int = 2
    agent_method: str = "clarify_agent"
    max_dialogues: int | None = None
    sample_seed: int = 0
    validation: pl.DataFrame | None = None  # benchmark/annotation_agreement: None for external datasets only
    trained: pl.DataFrame | None = None  # evaluation/trained_comparison: trained subjects vs their reference


def _persona_table(cmp: pl.DataFrame, scope: str, methods: Sequence[str] | None = None, std: bool = True,
                   agent: str = "clarify_agent") -> pl.DataFrame:
    """Tables 5/6 layout: P PV OF CT FA RF Avg (Std), significant cells of the agent marked with '*'."""
    t = cmp.filter(pl.col("scope") == scope)
    if methods is not None:
        t = t.filter(pl.col("method").is_in(list(methods)))
    if t.is_empty():
        return t
    rows = []
    for r in t.iter_rows(named=True):
        sig = set(r.get("agent_better_personas") or []) if r["method"] == agent else set()
        row = {"dataset": r["dataset"], "subject": r["subject"], "method": r["method"], "n": r["n"],
               "acc [95% CI]": _pct_ci(r.get("accuracy"), r.get("accuracy_ci_low"), r.get("accuracy_ci_high"))}
        for key, abbr in PERSONA_ABBR.items():
            v = r.get(key)
            row[abbr] = "" if v is None else f"{v * 100:.1f}" + ("*" if key in sig else "") + (
                f" ({r[key + '_n']})" if r.get(key + "_n") is not None else "")
        row["Avg"] = "" if r["persona_avg"] is None else f"{r['persona_avg'] * 100:.1f}"
        if std:
            row["Std"] = "" if r["persona_std"] is None else f"{r['persona_std'] * 100:.2f}"
        row["calls/turn"] = "" if r["calls_per_turn"] is None else f"{r['calls_per_turn']:.2f}"
        row["protocol"] = _pct(r.get("protocol_compliance"))
        row["is_question"] = _pct(r.get("question_share"))
        row["truncated"] = _pct(r.get("truncated_share"))
        row["llm_errors"] = r.get("llm_errors")
        rows.append(row)
    return pl.DataFrame(rows)


def _pct(v: float | None) -> str:
    return "" if v is None else f"{v * 100:.1f}"


def _channel_sentence(cmp: pl.DataFrame) -> str:
    """Which decision channel every method used in this run (evaluation.structured_output)."""
    if "decision_channel" not in cmp.columns or cmp.is_empty():
        return ""
    channels = sorted(cmp["decision_channel"].drop_nulls().unique().to_list())
    if not channels:
        return ""
    words = {"free_text": "free text read by the one protocol parser (\"The answer is\" / \"The clarifying "
                          "question is\"; ClarifyAgent's Output module included)",
             "structured": "schema-constrained JSON decisions (ClarifyAgent's Output module included)"}
    return "Decision channel of every method: " + "; ".join(words.get(c, c) for c in channels) + ". "


def _pct_ci(v: float | None, low: float | None, high: float | None) -> str:
    """'62.5 [30.6-86.3]': an accuracy with its 95% CI, in percent."""
    return "" if v is None else f"{_pct(v)} [{_pct(low)}-{_pct(high)}]"


def render_report(inputs: ReportInputs, plots: Sequence[str] = ()) -> str:
    """Markdown: method x persona at the comparison turn and over all turns (Tables 3/5), ablations with Std.
    (Table 6), overall shares, significance, by turn, subtype x turn (Table 4), question quality (Figure 3),
    pairwise win/tie/lose, error counts, and one ClarifyAgent trace."""
    m, cmp, pred = inputs.metric_tables, inputs.method_comparison, inputs.predictions
    turn_scope = f"turn_{inputs.comparison_turn}"
    evaluated = pred.filter(pl.col("status").is_in([Status.OK, Status.PARSE_ERROR]))
    sample = ("every dialogue" if inputs.max_dialogues is None
              else f"a sample of {inputs.max_dialogues} dialogues per dataset (seed {inputs.sample_seed}, "
                   "spread over personas; the same dialogues for every method)")
    parts = [
        "# ClarifyMT-Bench evaluation report\n",
        f"Evaluated on {sample}. Turns evaluated: {evaluated.height} (excluded for LLM / input errors: "
        f"{pred.height - evaluated.height}). {_channel_sentence(cmp)}Accuracy and the other shares are "
        "percentages of evaluated turns, the paper's action-only accuracy; a reply that does not follow the "
        "protocol (invalid) counts as wrong; a clarify reply that is no question is counted in `not_a_question` "
        "and counts wrong only with evaluation.clarify_must_be_question. Turn 1 is the same prompt in the six "
        "persona dialogues of a query: over all turns it is counted once per query (`n_independent`), and every "
        "95% CI and paired test is clustered by query (`n_queries`). Every accuracy comes with its n (persona "
        "cells: n in brackets). `protocol` is the share of replies that followed the reply format, `is_question` "
        "the share of clarify replies that are questions, `truncated` the share of generations cut at max_tokens. "
        f"`*` marks a persona where {inputs.agent_method} is significantly better than every baseline "
        "(evaluation.significance_baselines, ablations excluded) after a Holm correction over the persona x "
        "baseline cells, with at least evaluation.min_n_significance paired queries.\n",
    ]
    parts += [f"## Method x persona at turn {inputs.comparison_turn} (Table 5 layout)\n",
              markdown_table(_persona_table(cmp, turn_scope, agent=inputs.agent_method))]
    if "accuracy_by_persona.png" in plots:  # tables first, the plot of the same numbers second
        parts.append("![accuracy by persona](accuracy_by_persona.png)\n")
    parts += ["## Method x persona over all turns\n",
              markdown_table(_persona_table(cmp, "all_turns", agent=inputs.agent_method))]
    ablation = [inputs.agent_method, *sorted(x for x in cmp["method"].unique().to_list()
                                             if x.startswith(inputs.agent_method + "_no_"))] if cmp.height else []
    if len(ablation) > 1:
        parts += [f"## Ablations at turn {inputs.comparison_turn} (Table 6 layout: Std. across personas)\n",
                  markdown_table(_persona_table(cmp, turn_scope, ablation, agent=inputs.agent_method))]
    if cmp.height:
        overall = cmp.filter(pl.col("scope") == "all_turns").select(
            "dataset", "subject", "method", "n", "n_independent", "n_queries", *_PCT, "llm_errors", "input_errors",
            "macro_f1", "calls_per_turn", *[c for c in ("truncated_share",) if c in cmp.columns])
        parts += ["## Overall (all turns; a query's shared turn 1 counted once)\n",
                  markdown_table(overall, plain=["calls_per_turn", "n_independent"])]
        if "calls_vs_accuracy.png" in plots:
            parts.append("![LLM calls per turn vs accuracy](calls_vs_accuracy.png)\n")
        sig = cmp.filter(pl.col("reference_method").is_not_null()).select(
            "dataset", "subject", "scope", "method", "reference_method", "n_paired", "n_paired_queries",
            "diff_vs_reference", "diff_ci_low", "diff_ci_high", "test", "p_value", "p_holm", "correction",
            "significant", "p_ttest", "p_sign_flip", "agent_better_personas")
        corrections = sorted({c for c in sig["correction"].drop_nulls().to_list() if c.startswith("holm")})
        parts += [f"## Paired significance: each method vs {inputs.agent_method}\n",
                  "diff_vs_reference = method accuracy - agent accuracy on the same turns, with a 95% CI clustered "
                  "by query (cluster-robust t interval). `test`: cluster-robust paired t-test (the paper's t-test, "
                  "turns of one query as one unit) from evaluation.ttest_min_n paired queries on, else an exact "
                  "sign-flip permutation test of the per-query differences. Only the baselines are tested; "
                  f"correction: {'; '.join(corrections) or 'none (no baseline in this run)'} (Holm, family-wise "
                  "alpha). `significant` uses p_holm; ablations and variants show their difference and an "
                  "unadjusted p only.\n",
                  markdown_table(sig, plain=["p_value", "p_holm", "p_ttest", "p_sign_flip"])]
    parts += trained_section(inputs.trained)
    errors = pred.group_by("dataset", "subject", "method").agg(
        pl.len().alias("turns"), (pl.col("status") == Status.PARSE_ERROR.value).sum().alias("parse_errors"),
        (pl.col("action") == "invalid").sum().alias("invalid_outputs"),
        (pl.col("status") == Status.LLM_ERROR.value).sum().alias("llm_errors"),
        (pl.col("status") == Status.INPUT_ERROR.value).sum().alias("input_errors"),
        pl.col("step_errors").sum().alias("agent_step_errors") if "step_errors" in pred.columns
        else pl.lit(None, pl.Int64).alias("agent_step_errors")).sort("dataset", "subject", "method")
    parts += ["## Parse errors and invalid outputs (counted, never hidden)\n", markdown_table(errors)]
    by_turn = m.filter(pl.col("breakdown") == "by_turn").select("dataset", "subject", "method", "turn", "n", *_PCT,
                                                                "llm_errors")
    parts += ["## By turn\n", markdown_table(by_turn)]
    if "accuracy_by_turn.png" in plots:
        parts.append("![accuracy by turn](accuracy_by_turn.png)\n")
    sub = m.filter(pl.col("breakdown") == "by_subtype_turn")
    if not sub.is_empty():
        wide = sub.pivot(on="subtype", index=["dataset", "subject", "method", "turn"], values="accuracy")
        order = [s for s in SUBTYPE_ORDER if s in wide.columns] + sorted(
            c for c in wide.columns if c not in SUBTYPE_ORDER and c not in ("dataset", "subject", "method", "turn"))
        wide = wide.select("dataset", "subject", "method", "turn", *order).with_columns(
            avg=pl.mean_horizontal(order)).sort("dataset", "subject", "method", "turn")
        parts += ["## Accuracy by subtype x turn (Table 4 layout)\n", markdown_table(wide)]
        if "subtype_turn_heatmap.png" in plots:
            parts.append("![subtype x turn](subtype_turn_heatmap.png)\n")
    parts += _validation_section(inputs.validation)
    parts += _quality_sections(inputs, plots)
    parts += _pairwise_sections(inputs.pairwise)
    parts += _trace_example(pred, inputs.agent_method)
    return "\n".join(parts)


def _vs(a: float | None, b: float | None) -> str:
    return f"{_pct(a) or '-'} / {_pct(b) or '-'}"


def _points_ci(diff: float | None, low: float | None, high: float | None) -> str:
    """A difference in percentage points with its CI; the CI left out when there is none (e.g. one paired cluster)."""
    if diff is None:
        return ""
    ci = f" [{low * 100:+.1f}, {high * 100:+.1f}]" if low is not None and high is not None else " [no CI]"
    return f"{diff * 100:+.1f}{ci}"


def trained_section(trained: pl.DataFrame | None) -> list[str]:
    """'Trained models': each trained subject vs its reference on held-out data, one table and one plain sentence
    per comparison (which says so when the trained model does not improve)."""
    if trained is None or trained.is_empty():
        return []
    rows, lines = [], []
    for r in trained.iter_rows(named=True):
        diff = _points_ci(r["diff"], r["diff_ci_low"], r["diff_ci_high"])
        rows.append({"dataset": r["dataset"], "subject": r["subject"], "reference": r["reference"],
                     "n / ref n": f"{r['n']} / {r['ref_n']}",
                     "acc [95% CI]": _pct_ci(r["accuracy"], r["accuracy_ci_low"], r["accuracy_ci_high"]),
                     "ref acc [95% CI]": _pct_ci(r["ref_accuracy"], r["ref_accuracy_ci_low"], r["ref_accuracy_ci_high"]),
                     "macro-F1": _vs(r["macro_f1"], r["ref_macro_f1"]),
                     "protocol": _vs(r["protocol_compliance"], r["ref_protocol_compliance"]),
                     "under": _vs(r["under_clarification"], r["ref_under_clarification"]),
                     "over": _vs(r["over_clarification"], r["ref_over_clarification"]),
                     "judge (n)": "" if r["judge_score"] is None and r["ref_judge_score"] is None else
                     f"{r['judge_score'] if r['judge_score'] is not None else '-'} ({r['judge_n']}) / "
                     f"{r['ref_judge_score'] if r['ref_judge_score'] is not None else '-'} ({r['ref_judge_n']})",
                     "diff [95% CI]": diff, "test": r["test"],
                     "p": "" if r["p_value"] is None else f"{r['p_value']:.3g}", "verdict": r["verdict"]})
        lines.append(f"- **{r['subject']}** vs {r['reference']} on {r['dataset']} ({r['method']}, "
                     f"{r['n_paired']} paired turns): {r['verdict']}" + (
                         f"; accuracy {_pct(r['accuracy'])} vs {_pct(r['ref_accuracy'])}, difference {diff} points, "
                         f"{r['test']} p = {r['p_value']:.3g}." if r["diff"] is not None and r["p_value"] is not None
                         else "."))
    intro = ("Each trained subject against its reference model with the same method on the same held-out turns: "
             "nothing was trained or tuned on these sets (the `held_out_disjoint` check counts evaluation queries "
             "found in any training export; it must be 0). Pairs are `subject / reference`: accuracy with n and a "
             "Wilson 95% CI; macro-F1 of ask/answer, protocol compliance and under-/over-clarification in percent; "
             "judge score 0-5 where judged; diff = subject - reference accuracy in points with a 95% CI "
             "(Agresti-Min), tested with exact McNemar (the paired t-test from evaluation.ttest_min_n turns on). "
             "A trained model counts as improved only when the difference is significant.\n")
    return ["## Trained models\n", intro, markdown_table(pl.DataFrame(rows)), "\n".join(lines) + "\n"]


def _validation_section(agreement: pl.DataFrame | None) -> list[str]:
    """The benchmark's validation round (paper §4.2): which path ran, removals per reason, kappa and judge-vs-human r."""
    parts = ["## Benchmark validation (paper §4.2: Po .8627, kappa .598; judge vs human Pearson r .658)\n"]
    if agreement is None or agreement.is_empty():
        return parts + ["_(benchmark/annotation_agreement not built: no generated benchmark in this run)_\n"]
    row = agreement.row(0, named=True)
    sheet = row["path"] in ("human", "illustrative_sheet")
    source = (f"the filled review sheet `{row['sheet']}` ({row['sheet_rows_matched']} of {row['sheet_rows']} rows "
              f"matched this run's queries, {row['sheet_rows_rejected']} unreadable) plus the automatic filter for "
              "the rest" if sheet else "the automatic filter only (no filled review sheet)")
    if row["path"] == "illustrative_sheet":
        parts.append(f"Validated with {source}. **This sheet is the shipped example: {ILLUSTRATIVE}.** Its "
                     "kappa, agreement and r only show that the round trip works; they measure no human "
                     "agreement. Fill the exported `review_sheet.csv` and point benchmark.annotations_path at it "
                     "for an annotation study.\n")
    else:
        parts.append(f"Validated with {source}. Kappa and agreement are over the sheet's double-annotated rows "
                     "(human agreement of the user's annotators); r is between the judge's rating and the "
                     "annotators' mean rating.\n")
    cols = ["path", *[c for c in ("labels",) if c in agreement.columns], "validated_rows", "valid", "removed_human",
            "removed_prompt_echo", "removed_low_rating", "removed_off_category", "double_annotated",
            "observed_agreement", "kappa", "rated", "pearson_r"]
    return parts + [markdown_table(agreement.select(cols), plain=["observed_agreement", "kappa", "pearson_r"])]


def _quality_sections(inputs: ReportInputs, plots: Sequence[str]) -> list[str]:
    js = inputs.judge_scores
    parts = ["## Clarifying-question quality\n"]
    if js.is_empty():
        return parts + ["_(no clarify turns with a reference question were evaluated)_\n"]
    parts += ["LLM judge score 0-5 on a per-subtype sample (a method that answers where the reference asks "
              "scores 0); token-F1 (stopwords removed) and BERTScore-F1 of the method's output on every turn whose "
              "reference is a clarifying question, as ClariLM §4.3 averages them (an empty output scores 0); "
              "`*_asked`: the same over only the turns where the method asked.\n",
              markdown_table(question_quality(js), plain=["judge_score"])]
    by_sub = js.filter(pl.col("score").is_not_null()).group_by("dataset", "subject", "method", "subtype").agg(
        pl.col("score").mean().alias("judge_score"), pl.len().alias("n")).sort("dataset", "subject", "method",
                                                                                  "subtype")
    if not by_sub.is_empty():
        wide = by_sub.pivot(on="subtype", index=["dataset", "subject", "method"], values="judge_score")
        parts += ["### Judge score by subtype (Figure 3)\n", markdown_table(wide, plain=wide.columns)]
        if "judge_by_subtype.png" in plots:
            parts.append("![judge score by subtype](judge_by_subtype.png)\n")
    return parts


def _pairwise_sections(pw: pl.DataFrame) -> list[str]:
    """Method pairs per subject, then ClariLM's Figure 4: one model against another per dataset."""
    if pw.is_empty():
        return []
    summary = pairwise_summary(pw)
    parts = []
    shares = ["n", "win_share", "tie_share", "lose_share", "judged_by_llm", "errors"]
    methods = summary.filter(pl.col("comparison") == "methods")
    if not methods.is_empty():
        parts += ["### Pairwise win / tie / lose (method_a vs method_b, judged in both orders)\n",
                  markdown_table(methods.select("dataset", "subject", "method_a", "method_b", *shares))]
    models = summary.filter(pl.col("comparison") == "subjects")
    if not models.is_empty():
        parts += ["### Figure 4: model vs model, win / tie / lose per dataset (judged in both orders)\n",
                  "`subject` (A) against `subject_b` (B), both with the method in `method_a`; shares of the decided "
                  "items; a win or loss must hold with the positions swapped, anything else is a tie.\n",
                  markdown_table(models.select("dataset", "subject", "subject_b", "method_a", "win", "tie", "lose",
                                               *shares))]
    return parts


def _trace_example(pred: pl.DataFrame, agent: str) -> list[str]:
    if "slots" not in pred.columns:
        return []
    rows = pred.filter((pl.col("method") == agent) & (pl.col("status") == Status.OK) & pl.col("slots").is_not_null())
    if rows.is_empty():
        return []
    r = rows.sort("dialogue_id", "turn").row(0, named=True)
    slots = json.loads(r["slots"]) if r["slots"] else []
    lines = [f"## Why did {agent} decide? One row's intermediates\n",
             f"Dialogue `{r['dialogue_id']}` turn {r['turn']} (persona {r['persona']}, reference "
             f"{r['reference_action']}): decided **{r['action']}** by {r['decided_by']}; forecast persona "
             f"{r['persona_forecast']}; RSC {r['rsc']}; target slot {r['target_slot']}.\n"]
    if slots:
        lines.append(markdown_table(pl.DataFrame(slots).with_columns(pl.all().cast(pl.Utf8))))
    lines.append(f"Response: {r['response']!r}\n\nEvery row of `evaluation.predictions` keeps these columns "
                 "(`slots`, `rsc`, `persona_forecast`, `target_slot`, `decided_by`, `assumptions`) and the full "
                 "`trace` JSON.\n")
    return lines
