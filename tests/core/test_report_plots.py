"""Readable report plots (issue 30.4): at the demo's sizes (4 datasets, one subject with 11 methods and six trained
subjects with one) no chart has more than MAX_SERIES series, every series is drawn once, and the Table 5 layout
comes before its plot."""

from __future__ import annotations

import random

import matplotlib.pyplot as plt
import polars as pl

from dagster_project.core.clarifymt.metrics import evaluation_tables, method_comparison
from dagster_project.core.clarifymt.report import ReportInputs, question_quality, render_report
from dagster_project.core.clarifymt.report_plots import MAX_SERIES, report_figures, series_panels
from dagster_project.core.shared.taxonomy import PERSONAS

DATASETS = ("clarifymt", "clariq", "in3", "clarilm_test")
METHODS = ("base", "majority_vote", "cot", "intent_sim", "at_cot", "clarify_agent", "clarify_agent_no_planner",
           "clarify_agent_no_perceiver", "clarify_agent_no_forecaster", "intent_sim_interpretations",
           "at_cot_subtypes")
SYSTEMS = [("smollm2", m) for m in METHODS] + [(s, "base") for s in ("smollm2_hf", "clarilm_sft", "clarilm_dpo",
                                                                    "double_turn_dpo", "single_turn_dpo",
                                                                    "intents_tuned")]


def _inputs() -> ReportInputs:
    rng = random.Random(0)
    rows, judge = [], []
    for d in DATASETS:
        for s, m in SYSTEMS:
            for p in PERSONAS:
                for q in range(2):
                    for t in range(1, p.turns + 1):
                        ref = "clarify" if t == 1 or p.turns == 3 else "answer"
                        act = rng.choice(["clarify", "answer"])
                        rows.append({"dataset": d, "subject": s, "method": m, "dialogue_id": f"q{q}-{p.key}",
                                     "query_id": f"q{q}", "turn": t, "persona": p.key, "subtype": ("who", "when")[q],
                                     "reference_action": ref, "action": act, "status": "ok", "llm_calls": 1,
                                     "response": "Which one?" if act == "clarify" else "This one.",
                                     "is_question": act == "clarify" or None})
                        if ref == "clarify":
                            judge.append({"dataset": d, "subject": s, "method": m, "subtype": ("who", "when")[q],
                                          "asked": act == "clarify", "score": rng.randint(0, 5),
                                          "token_f1": 0.5, "bertscore_f1": None})
    pred, js = pl.DataFrame(rows), pl.DataFrame(judge)
    return ReportInputs(evaluation_tables(pred), method_comparison(pred, quality=question_quality(js)), js,
                        pl.DataFrame(), pred)


def _series(ax) -> int:
    """Bars groups, lines and scatter groups drawn on the axes (an image, a heatmap, counts as one)."""
    return len(ax.containers) + len(ax.lines) + len(ax.collections) + len(ax.images)


def test_no_chart_has_more_than_eight_series_and_each_series_is_drawn_once() -> None:
    inputs = _inputs()
    figures = report_figures(inputs)
    assert set(figures) == {"accuracy_by_persona.png", "calls_vs_accuracy.png", "accuracy_by_turn.png",
                            "subtype_turn_heatmap.png", "judge_by_subtype.png"}
    expected = len(DATASETS) * len(SYSTEMS)  # 68 dataset x subject x method series
    try:
        for name, fig in figures.items():
            charts = [ax for ax in fig.axes if ax.has_data()]
            counts = [_series(ax) for ax in charts]
            assert counts and max(counts) <= MAX_SERIES, (name, counts)
            if name != "subtype_turn_heatmap.png":  # one heatmap per series, at most 12
                assert sum(counts) == expected, (name, sum(counts))
                labels = [tuple(t.get_text() for t in ax.get_legend().get_texts()) for ax in charts]
                assert all(len(set(lab)) == len(lab) for lab in labels), labels  # distinct names in each chart
                for ax in charts:  # the dataset is named in every chart's title
                    assert any(ax.get_title().split(": ")[1].startswith(d) for d in DATASETS), ax.get_title()
    finally:
        for fig in figures.values():
            plt.close(fig)


def test_series_panels_keep_a_subject_together_and_cut_large_ones_evenly() -> None:
    rows = [{"dataset": "d", "subject": s, "method": m} for s, m in SYSTEMS]
    panels = series_panels(rows)
    assert [len(p.rows) for p in panels] == [6, 5, 6]  # 11 methods of smollm2 in two even parts, six trained
    assert [p.title for p in panels] == ["d: smollm2 (1/3)", "d: smollm2 (2/3)", "d: 6 subjects (3/3)"]
    assert panels[0].label(panels[0].rows[0]) == "base" and panels[2].label(panels[2].rows[0]) == "smollm2_hf/base"


def test_table_5_layout_comes_before_its_plot() -> None:
    text = render_report(_inputs(), ["accuracy_by_persona.png"])
    assert text.index("(Table 5 layout)") < text.index("![accuracy by persona]") < text.index("over all turns\n")
