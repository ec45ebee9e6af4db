"""Issue 14.5 (significance at small n: exact tests, n and 95% CIs, a minimum n) and issue 16.5 (a method
whose rows all failed stays in every table with n = 0 and its error count)."""

import math

import polars as pl
import pytest

from dagster_project.core.clarifymt.metrics import evaluation_tables, method_comparison
from dagster_project.core.shared.metrics import (
    accuracy_ci,
    paired_difference_ci,
    paired_significance,
)


def test_constant_difference_at_tiny_n_is_not_p_zero():
    r = paired_significance([1, 1], [0, 0])
    assert r["test"] == "mcnemar_exact" and r["p"] == pytest.approx(0.5)  # 2 * 0.5^2
    assert math.isnan(r["p_ttest"]) and r["diff_ci_low"] < 0 < r["diff_ci_high"]


def test_ttest_only_from_ttest_min_n_on():
    a, b = [1, 1, 1, 0, 1, 1] * 5, [0, 0, 1, 0, 0, 1] * 5
    assert paired_significance(a, b, ttest_min_n=30)["test"] == "ttest"
    small = paired_significance(a, b, ttest_min_n=31)
    assert small["test"] == "mcnemar_exact" and small["p"] == small["p_mcnemar"]


def test_wilson_interval_by_hand():
    k, n, z = 2, 3, 1.959963984540054
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert accuracy_ci(k, n) == pytest.approx((centre - half, centre + half))
    assert all(math.isnan(x) for x in accuracy_ci(0, 0))


def test_paired_difference_ci_by_hand():
    # Agresti-Min: n=10, 4 pairs only a right, 1 only b -> p_a = 4.5/12, p_b = 1.5/12, diff 0.25
    low, high = paired_difference_ci(4, 1, 10)
    se = math.sqrt((6 / 12 - 0.25 ** 2) / 12)
    assert (low, high) == pytest.approx((0.25 - 1.959963984540054 * se, 0.25 + 1.959963984540054 * se))


def _rows(n, agent_act="clarify", other_act="answer", persona="off_focus"):
    rows = []
    for i in range(n):
        for method, act in (("agent", agent_act), ("base", other_act)):
            rows.append({"dataset": "d", "subject": "s", "method": method, "dialogue_id": f"x{i}", "turn": 2,
                         "persona": persona, "subtype": "goal", "reference_action": "clarify", "action": act,
                         "status": "ok", "llm_calls": 1})
    return pl.DataFrame(rows)


def test_never_significant_below_min_n():
    # 8 pairs, all discordant: exact p = 2 * 0.5^8 < 0.05, but 8 < min_n
    cmp = method_comparison(_rows(8), agent="agent", min_n=10).filter(pl.col("scope") == "turn_2")
    by = {r["method"]: r for r in cmp.to_dicts()}
    assert by["base"]["p_value"] == pytest.approx(2 * 0.5 ** 8)
    assert by["base"]["significant"] is False and by["base"]["agent_better_personas"] == []
    ok = method_comparison(_rows(8), agent="agent", min_n=8).filter(pl.col("scope") == "turn_2")
    base = ok.filter(pl.col("method") == "base").to_dicts()[0]
    assert base["significant"] is True and base["agent_better_personas"] == ["off_focus"]


def test_every_accuracy_and_difference_has_n_and_ci():
    cmp = method_comparison(_rows(8), agent="agent").filter(pl.col("scope") == "all_turns")
    base = cmp.filter(pl.col("method") == "base").to_dicts()[0]
    assert (base["n"], base["off_focus_n"], base["n_paired"]) == (8, 8, 8)
    assert base["accuracy"] == 0.0 and base["accuracy_ci_low"] == pytest.approx(0.0, abs=1e-12)
    assert base["accuracy_ci_high"] == pytest.approx(accuracy_ci(0, 8)[1])
    assert base["diff_vs_reference"] == -1.0 and base["diff_ci_low"] < -0.5 and base["diff_ci_high"] < 0
    t = evaluation_tables(_rows(8))
    assert t["accuracy_ci_low"].null_count() == 0 and (t["n"] == 8).all()


def test_a_method_with_only_failed_rows_stays_with_n_zero():
    pred = pl.concat([_rows(4), _rows(4).filter(pl.col("method") == "base").with_columns(
        method=pl.lit("down"), status=pl.lit("llm_error"), action=pl.lit("invalid"))])
    t = evaluation_tables(pred).filter(pl.col("method") == "down")
    assert set(t["breakdown"]) >= {"overall", "by_persona", "by_turn"}
    overall = t.filter(pl.col("breakdown") == "overall").to_dicts()[0]
    assert (overall["n"], overall["llm_errors"], overall["accuracy"]) == (0, 4, None)
    cmp = method_comparison(pred, agent="agent").filter(pl.col("method") == "down")
    assert cmp.height == 2 and cmp["n"].to_list() == [0, 0] and cmp["llm_errors"].to_list() == [4, 4]
    assert cmp["n_paired"].to_list() == [0, 0] and cmp["significant"].to_list() == [None, None]  # not a baseline
