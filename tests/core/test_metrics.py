"""Clarification accuracy / under- / over-clarification (ClarifyMT-Bench §3.2, §5) and Cohen's kappa."""

import polars as pl
import pytest

from dagster_project.core.clarifymt.metrics import BREAKDOWNS, clarification_metrics, metric_tables
from dagster_project.core.shared.metrics import cohen_kappa

SHARES = ["accuracy", "under_clarification", "over_clarification", "invalid"]

# subject s:
#   d1 precise / lexical:        t1 clarify->clarify (ok)   t2 answer->clarify (over)
#   d2 partial_vague / lexical:  t1 clarify->answer (under) t2 clarify->clarify (ok)  t3 answer->invalid
#   d3 refusal / scope:          t1 clarify->clarify (ok)   t2 answer->answer (ok)
# subject t:
#   d3 refusal / scope:          t1 clarify->clarify (ok)   t2 answer->clarify (over)
ROWS = [
    ("s", "d1", 1, "precise", "lexical", "clarify", "clarify"),
    ("s", "d1", 2, "precise", "lexical", "answer", "clarify"),
    ("s", "d2", 1, "partial_vague", "lexical", "clarify", "answer"),
    ("s", "d2", 2, "partial_vague", "lexical", "clarify", "clarify"),
    ("s", "d2", 3, "partial_vague", "lexical", "answer", "invalid"),
    ("s", "d3", 1, "refusal", "scope", "clarify", "clarify"),
    ("s", "d3", 2, "refusal", "scope", "answer", "answer"),
    ("t", "d3", 1, "refusal", "scope", "clarify", "clarify"),
    ("t", "d3", 2, "refusal", "scope", "answer", "clarify"),
]


@pytest.fixture
def pred() -> pl.DataFrame:
    return pl.DataFrame(
        [dict(zip(["subject", "dialogue_id", "turn", "persona", "subtype", "reference_action", "action"], r),
              method="base") for r in ROWS],
        schema_overrides={"turn": pl.Int64},
    )


def metrics_of(df: pl.DataFrame, **where) -> dict:
    for k, v in where.items():
        df = df.filter(pl.col(k) == v)
    assert df.height == 1, where
    return df.to_dicts()[0]


def test_overall_subject_s(pred):
    m = clarification_metrics(pred.filter(pl.col("subject") == "s"), [])
    assert m.height == 1
    r = m.to_dicts()[0]
    assert r["n"] == 7
    assert r["accuracy"] == pytest.approx(4 / 7)
    assert r["under_clarification"] == pytest.approx(1 / 7)
    assert r["over_clarification"] == pytest.approx(1 / 7)
    assert r["invalid"] == pytest.approx(1 / 7)


def test_grouped_by_turn(pred):
    m = clarification_metrics(pred.filter(pl.col("subject") == "s"), ["turn"])
    assert m["turn"].to_list() == [1, 2, 3]
    assert m["n"].to_list() == [3, 3, 1]
    assert m["accuracy"].to_list() == pytest.approx([2 / 3, 2 / 3, 0.0])
    assert m["under_clarification"].to_list() == pytest.approx([1 / 3, 0.0, 0.0])
    assert m["over_clarification"].to_list() == pytest.approx([0.0, 1 / 3, 0.0])
    assert m["invalid"].to_list() == pytest.approx([0.0, 0.0, 1.0])


def test_invalid_counts_as_wrong_even_when_nothing_else_is():
    df = pl.DataFrame({"reference_action": ["clarify", "answer"], "action": ["invalid", "invalid"]})
    r = clarification_metrics(df, []).to_dicts()[0]
    assert (r["accuracy"], r["under_clarification"], r["over_clarification"], r["invalid"]) == (0, 0, 0, 1)


def test_metric_tables_breakdowns_and_values(pred):
    t = metric_tables(pred)
    assert t.columns == ["breakdown", "subject", "method", "persona", "subtype", "turn",
                         "n", "accuracy", "accuracy_ci_low", "accuracy_ci_high", "under_clarification",
                         "over_clarification", "invalid", "not_a_question", "protocol_compliance", "question_share",
                         "llm_errors", "input_errors", "n_independent", "n_queries"]
    assert set(t["breakdown"].unique().to_list()) == set(BREAKDOWNS) == {
        "overall", "by_turn", "by_persona", "by_subtype", "by_subtype_turn"}
    counts = dict(t.group_by("breakdown").len().iter_rows())
    # overall: s, t; by_turn: s 3 + t 2; by_persona: s 3 + t 1; by_subtype: s 2 + t 1; by_subtype_turn: s 5 + t 2
    assert counts == {"overall": 2, "by_turn": 5, "by_persona": 4, "by_subtype": 3, "by_subtype_turn": 7}

    overall = t.filter(pl.col("breakdown") == "overall")
    assert overall.select("persona", "subtype", "turn").null_count().row(0) == (2, 2, 2)
    assert metrics_of(overall, subject="s")["n"] == 7
    assert metrics_of(overall, subject="t")["accuracy"] == pytest.approx(0.5)
    assert metrics_of(overall, subject="t")["over_clarification"] == pytest.approx(0.5)

    bp = t.filter(pl.col("breakdown") == "by_persona")
    assert metrics_of(bp, subject="s", persona="precise")["accuracy"] == pytest.approx(0.5)
    assert metrics_of(bp, subject="s", persona="precise")["over_clarification"] == pytest.approx(0.5)
    pv = metrics_of(bp, subject="s", persona="partial_vague")
    assert (pv["n"], pv["accuracy"], pv["under_clarification"], pv["invalid"]) == (3, pytest.approx(1 / 3),
                                                                                 pytest.approx(1 / 3),
                                                                                 pytest.approx(1 / 3))
    assert metrics_of(bp, subject="s", persona="refusal")["accuracy"] == 1.0
    assert bp.filter(pl.col("subject") == "s")["n"].sum() == 7

    bs = t.filter(pl.col("breakdown") == "by_subtype")
    lex = metrics_of(bs, subject="s", subtype="lexical")
    assert lex["n"] == 5
    assert [lex[k] for k in SHARES] == pytest.approx([2 / 5, 1 / 5, 1 / 5, 1 / 5])

    bst = t.filter(pl.col("breakdown") == "by_subtype_turn")
    assert metrics_of(bst, subject="s", subtype="lexical", turn=1)["under_clarification"] == pytest.approx(0.5)
    assert metrics_of(bst, subject="s", subtype="lexical", turn=3)["invalid"] == 1.0
    assert metrics_of(bst, subject="t", subtype="scope", turn=2)["over_clarification"] == 1.0
    assert bst["n"].sum() == pred.height


def test_four_shares_sum_to_one_in_every_row(pred):
    t = metric_tables(pred)
    sums = t.select(pl.sum_horizontal(SHARES)).to_series().to_list()
    assert sums == pytest.approx([1.0] * t.height)


def test_cohen_kappa_by_hand():
    a = ["c"] * 6 + ["a"] * 4
    b = ["c"] * 3 + ["a"] * 7
    # agree on items 1-3 (c/c) and 7-10 (a/a): P_o = 7/10 = 0.7
    # P_e = P_a(c) P_b(c) + P_a(a) P_b(a) = 0.6 * 0.3 + 0.4 * 0.7 = 0.46
    # kappa = (0.7 - 0.46) / (1 - 0.46) = 0.24 / 0.54 = 4/9
    k = cohen_kappa(a, b)
    assert k["observed_agreement"] == pytest.approx(0.7)
    assert k["kappa"] == pytest.approx(4 / 9)
    assert k["n"] == 10


def test_cohen_kappa_perfect_and_chance():
    assert cohen_kappa(["x", "y", "x"], ["x", "y", "x"])["kappa"] == pytest.approx(1.0)
    # P_o = 0.5, P_e = 0.5 * 0.5 + 0.5 * 0.5 = 0.5 -> kappa 0
    assert cohen_kappa(["x", "x", "y", "y"], ["x", "y", "x", "y"])["kappa"] == pytest.approx(0.0)


@pytest.mark.parametrize("a, b", [(["x", "y"], ["x"]), ([], []), (["x"], [])])
def test_cohen_kappa_rejects_unequal_or_empty(a, b):
    with pytest.raises(ValueError, match="equal length"):
        cohen_kappa(a, b)
