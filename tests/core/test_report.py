"""Markdown rendering of metric tables (report.py)."""

from dataclasses import replace

import polars as pl
import pytest

from dagster_project.core.clarifymt.metrics import metric_tables
from dagster_project.core.clarifymt.report import persona_pivot
from dagster_project.core.shared.tables import markdown_table


def test_markdown_table_formats_cells():
    df = pl.DataFrame({"subject": ["s", "t"], "n": [7, 2], "accuracy": [4 / 7, 1.0], "turn": [None, 3]})
    assert markdown_table(df) == (
        "| subject | n | accuracy | turn |\n"
        "|---|---|---|---|\n"
        "| s | 7 | 57.1 |  |\n"
        "| t | 2 | 100.0 | 3 |\n"
    )


def test_markdown_table_empty():
    assert markdown_table(pl.DataFrame({"a": []})) == "_(no rows)_\n"


def _pred(rows):
    return pl.DataFrame([dict(zip(["subject", "dialogue_id", "turn", "persona", "subtype",
                                   "reference_action", "action"], r), method="base") for r in rows])


# persona accuracies: refusal 2/2 = 1.0, precise 1/2 = 0.5, partial_vague 1/3; overall (micro) 4/7
PRED = _pred([
    ("s", "d3", 1, "refusal", "scope", "clarify", "clarify"),
    ("s", "d3", 2, "refusal", "scope", "answer", "answer"),
    ("s", "d1", 1, "precise", "lexical", "clarify", "clarify"),
    ("s", "d1", 2, "precise", "lexical", "answer", "clarify"),
    ("s", "d2", 1, "partial_vague", "lexical", "clarify", "answer"),
    ("s", "d2", 2, "partial_vague", "lexical", "clarify", "clarify"),
    ("s", "d2", 3, "partial_vague", "lexical", "answer", "invalid"),
])


def test_persona_pivot_layout():
    wide = persona_pivot(metric_tables(PRED))
    # paper Table 3 order (P, PV, OF, CT, FA, RF), restricted to the personas present, then avg
    assert wide.columns == ["subject", "method", "precise", "partial_vague", "refusal", "avg"]
    assert wide.height == 1
    r = wide.to_dicts()[0]
    assert (r["subject"], r["method"]) == ("s", "base")
    assert r["precise"] == pytest.approx(0.5)
    assert r["partial_vague"] == pytest.approx(1 / 3)
    assert r["refusal"] == pytest.approx(1.0)


def test_persona_pivot_one_row_per_subject_method():
    two = pl.concat([PRED, PRED.with_columns(subject=pl.lit("t"))])
    wide = persona_pivot(metric_tables(two))
    assert sorted(wide["subject"].to_list()) == ["s", "t"]


def test_persona_pivot_avg_is_mean_over_personas_as_in_paper_table3():
    r = persona_pivot(metric_tables(PRED)).to_dicts()[0]
    # (0.5 + 1/3 + 1.0) / 3 = 0.6111, not the turn-weighted 4/7 = 0.5714
    assert r["avg"] == pytest.approx((0.5 + 1 / 3 + 1.0) / 3)


def test_persona_pivot_avg_present_and_in_range():
    r = persona_pivot(metric_tables(PRED)).to_dicts()[0]
    assert 0.0 <= r["avg"] <= 1.0


def test_persona_pivot_empty_without_persona_rows():
    tables = metric_tables(PRED).filter(pl.col("breakdown") != "by_persona")
    assert persona_pivot(tables).is_empty()


# --------------------------------------------------------------------------- the full report (ReportInputs)

from dagster_project.core.clarifymt.metrics import evaluation_tables, method_comparison  # noqa: E402
from dagster_project.core.clarifymt.report import ReportInputs, question_quality, render_report  # noqa: E402
from dagster_project.core.clarifymt.report_page import render_html  # noqa: E402
from dagster_project.core.clarifymt.report_plots import report_plots  # noqa: E402


def _full_pred():
    rows = []
    for method, acts in (("clarify_agent", ["clarify", "answer"]), ("base", ["answer", "answer"]),
                         ("clarify_agent_no_planner", ["clarify", "clarify"])):
        for persona in ("precise", "refusal"):
            for t, (ref, act) in enumerate(zip(["clarify", "answer"], acts), start=1):
                rows.append({"dataset": "clarifymt", "subject": "s", "method": method, "dialogue_id": f"d-{persona}",
                             "turn": t, "persona": persona, "subtype": "lexical", "reference_action": ref,
                             "action": act, "status": "ok", "llm_calls": 1, "response": "Which?",
                             "slots": '[{"name": "city", "state": "unfilled"}]' if method == "clarify_agent" else None,
                             "rsc": False, "persona_forecast": None, "target_slot": "city", "decided_by": "planner",
                             "step_errors": 0})
    return pl.DataFrame(rows)


def _inputs():
    pred = _full_pred()
    judge = pl.DataFrame({"dataset": ["clarifymt"] * 2, "subject": ["s"] * 2, "method": ["clarify_agent", "base"],
                          "subtype": ["lexical"] * 2, "asked": [True, False], "score": [4, 0],
                          "token_f1": [0.5, None], "bertscore_f1": [0.9, None]})
    pairwise = pl.DataFrame({"dataset": ["clarifymt"], "subject": ["s"], "method_a": ["clarify_agent"],
                             "method_b": ["base"], "outcome": ["win"], "judged_by": ["rule"]})
    return ReportInputs(evaluation_tables(pred), method_comparison(pred, quality=question_quality(judge)), judge,
                        pairwise, pred, max_dialogues=2, sample_seed=7)


def test_question_quality_means():
    q = question_quality(_inputs().judge_scores).to_dicts()
    by = {r["method"]: r for r in q}
    assert by["clarify_agent"]["judge_score"] == 4.0 and by["base"]["judge_score"] == 0.0
    assert by["base"]["questions_asked"] == 0 and by["clarify_agent"]["bertscore_f1"] == 0.9


def test_render_report_sections_and_values():
    inputs = _inputs()
    plots = report_plots(inputs)
    assert set(plots) == {"accuracy_by_persona.png", "calls_vs_accuracy.png", "accuracy_by_turn.png",
                          "subtype_turn_heatmap.png", "judge_by_subtype.png"}
    assert all(png.startswith(b"\x89PNG") for png in plots.values())
    text = render_report(inputs, list(plots))
    assert "a sample of 2 dialogues per dataset (seed 7" in text
    # Table 5 layout row of the agent at turn 2: right on P and RF
    assert ("| clarifymt | s | clarify_agent | 2 | 100.0 [34.2-100.0] | 100.0 (1) |  |  |  |  | 100.0 (1) | 100.0 | "
            "0.00 | 1.00 |") in text
    assert "## Ablations at turn 2" in text and "clarify_agent_no_planner" in text
    assert "| clarifymt | s | clarify_agent | base | 1 | 100.0 | 0.0 | 0.0 | 0 |" in text  # pairwise win
    assert "![accuracy by persona](accuracy_by_persona.png)" in text
    assert "Why did clarify_agent decide?" in text


def test_render_html_is_self_contained():
    html = render_html("# T\n\n![p](a.png)\n\n| x |\n|---|\n| 1 |\n", {"a.png": b"\x89PNGdata"})
    assert 'src="data:image/png;base64,iVBOR2RhdGE="' in html and "<table>" in html
    assert "http" not in html.lower().replace("http-equiv", "")


def test_report_shows_the_validation_round_kappa_and_r():
    """Issue 14 item 2: the review-sheet round trip's kappa and judge-vs-human r reach the report."""
    from dagster_project.core.clarifymt.validation import agreement_table

    summary = {"path": "human", "sheet_rows": 11, "sheet_rows_matched": 9, "sheet_rows_unmatched": 2,
               "sheet_rows_rejected": 0, "validated_rows": 20, "decided_by_human": 9, "decided_automatically": 11,
               "valid": 14, "removed_human": 3, "removed_prompt_echo": 3, "removed_low_rating": 0,
               "removed_off_category": 0, "double_annotated": 11, "observed_agreement": 0.636, "kappa": 0.353,
               "rated": 11, "pearson_r": 0.22}
    inputs = _inputs()
    assert "not built" in render_report(inputs)  # no benchmark in this run: said, not hidden
    text = render_report(replace(inputs, validation=agreement_table(summary, "data/benchmark/review_sheet_example.csv")))
    assert "filled review sheet `data/benchmark/review_sheet_example.csv` (9 of 11 rows matched" in text
    # the shipped example's labels are the project's own (issue 27.6): said as such, never as human agreement
    assert ("| illustrative_sheet | illustrative labels written by the project, not an annotation study | 20 | 14 | "
            "3 | 3 | 0 | 0 | 11 | 0.64 | 0.35 | 11 | 0.22 |") in text


def test_accuracy_by_turn_plot_has_integer_turn_ticks_and_a_legend_outside_the_axes():
    import matplotlib.pyplot as plt

    from dagster_project.core.clarifymt.report_plots import accuracy_by_turn_figure

    by_turn = _inputs().metric_tables.filter(pl.col("breakdown") == "by_turn")
    fig = accuracy_by_turn_figure(by_turn, lambda r: r["method"])
    try:
        ax = fig.axes[0]
        assert list(ax.get_xticks()) == [1, 2]  # the turns, not 1.0, 1.2, ... 2.0
        fig.canvas.draw()
        legend = ax.get_legend().get_window_extent()
        axes = ax.get_window_extent()
        assert len(ax.get_legend().get_texts()) == 3  # one entry per method
        assert legend.x0 >= axes.x1 or legend.y1 <= axes.y0, (legend, axes)  # right of or below the plot area
    finally:
        plt.close(fig)
