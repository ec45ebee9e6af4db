"""Markdown rendering of metric tables (report.py)."""

import polars as pl
import pytest

from dagster_project.core.metrics import metric_tables
from dagster_project.core.report import markdown_table, persona_pivot


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
