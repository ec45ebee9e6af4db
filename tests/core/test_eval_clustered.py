"""Issue 27.4: statistics over independent units (a query's shared turn 1 counted once, CIs and paired tests
clustered by query, ClarifyAgent tested against the baselines only with a Holm correction) and 27.5 (the paper's
action-only accuracy by default)."""

import math

import numpy as np
import polars as pl
import pytest
from scipy import stats

from dagster_project.config import EvaluationConfig
from dagster_project.core.clarifymt.metrics import clarification_metrics, evaluation_tables, method_comparison
from dagster_project.core.shared.metrics import (
    accuracy_ci,
    clustered_accuracy,
    clustered_paired_test,
    holm,
    sign_flip_pvalue,
)

PERSONAS = ["precise", "partial_vague", "off_focus", "contradictory", "factually_wrong", "refusal"]


def _query_rows(q, method, turn1="clarify", turn2=("clarify",) * 6):
    """The six persona dialogues of query q: turn 1 (the same prompt in all six) and turn 2."""
    rows = []
    for p, act2 in zip(PERSONAS, turn2):
        ref2 = "answer" if p in ("precise", "refusal") else "clarify"
        for t, act, ref in ((1, turn1, "clarify"), (2, act2, ref2)):
            rows.append({"dataset": "clarifymt", "subject": "s", "method": method, "query_id": q,
                         "dialogue_id": f"{q}-{p}", "turn": t, "persona": p, "subtype": "goal",
                         "reference_action": ref, "action": act, "status": "ok", "llm_calls": 1})
    return rows


def test_a_querys_shared_turn_1_counts_once_over_all_turns():
    # turn 1 right (6 identical copies), turn 2: clarify everywhere -> 4 of 6 right
    pred = pl.DataFrame(_query_rows("q1", "m"))
    row = clarification_metrics(pred, []).to_dicts()[0]
    assert (row["n"], row["n_independent"], row["n_queries"]) == (12, 7, 1)
    assert row["accuracy"] == pytest.approx((1 + 4) / 7)  # not (6 + 4) / 12
    by_turn = {r["turn"]: r for r in evaluation_tables(pred).filter(pl.col("breakdown") == "by_turn").to_dicts()}
    assert by_turn[1]["n_independent"] == pytest.approx(1.0) and by_turn[1]["accuracy"] == 1.0
    # within one persona each query has a single turn 1: nothing to share
    persona = evaluation_tables(pred).filter(pl.col("breakdown") == "by_persona").to_dicts()
    assert all(r["n_independent"] == r["n"] == 2 for r in persona)


def test_clustered_ci_is_wilson_for_independent_turns_and_wider_for_copies():
    one = clustered_accuracy([1, 1, 0, 1, 0, 1, 1, 1], [1] * 8, range(8))
    assert (one["ci_low"], one["ci_high"]) == pytest.approx(accuracy_ci(6, 8))
    # the same 8 outcomes, each repeated 5 times inside its query: no more information than 8 turns
    copies = clustered_accuracy(np.repeat([1, 1, 0, 1, 0, 1, 1, 1], 5), [1] * 40, np.repeat(range(8), 5))
    assert copies["n_clusters"] == 8 and copies["n_eff"] == pytest.approx(8)
    assert (copies["ci_low"], copies["ci_high"]) == pytest.approx(accuracy_ci(6, 8))
    assert accuracy_ci(30, 40)[0] > copies["ci_low"]  # the row-level interval would be too narrow


def test_clustered_paired_test_reduces_to_the_paired_t_test_and_the_exact_sign_test():
    a = [1, 1, 1, 0, 1, 1, 0, 1, 1, 1]
    b = [0, 0, 1, 0, 0, 1, 1, 0, 1, 0]
    r = clustered_paired_test(a, b, [1] * 10, range(10), ttest_min_n=10)
    assert r["p_ttest"] == pytest.approx(stats.ttest_rel(a, b).pvalue) and r["test"] == "cluster_ttest"
    # 5 discordant pairs favour a, 1 favours b: the exact sign test on 6 pairs
    assert r["p_sign_flip"] == pytest.approx(stats.binomtest(1, 6).pvalue)
    assert r["mean_diff"] == pytest.approx(0.4) and r["diff_ci_low"] < 0.4 < r["diff_ci_high"]


def _scipy_sign_flip(d, seed, n_resamples=9999):
    return stats.permutation_test((d,), lambda x, axis=-1: np.sum(x, axis=axis), permutation_type="samples",
                                  vectorized=True, n_resamples=n_resamples, rng=np.random.default_rng(seed)).pvalue


def test_the_sampled_sign_flip_test_runs_in_batches_with_the_unbatched_p_value():
    """Past 2^G > n_resamples the sign flips are sampled; batching them (bounded memory) keeps every draw."""
    rng = np.random.default_rng(3)
    a, b = rng.integers(0, 2, 1500), rng.integers(0, 2, 1500)
    r = clustered_paired_test(a, b, [1] * 1500, np.arange(1500) // 2, seed=7)  # 750 clusters of two turns
    d = (a - b).reshape(750, 2).sum(axis=1).astype(float)
    assert r["n_clusters"] == 750 and r["p_sign_flip"] == _scipy_sign_flip(d, 7)


@pytest.mark.parametrize("g", [3, 13, 14, 15, 29, 101, 1004, 1005])
@pytest.mark.parametrize("seed", [0, 7])
def test_sign_flip_pvalue_is_scipys_on_the_same_seed(g, seed):
    """Exact below 2^G <= n_resamples, sampled above with scipy's own draws: the same p-value, for integer
    contrasts (unit weights), fractional ones (a shared turn 1 weighted once), a shifted mean (small p) and a
    batch that does not divide n_resamples."""
    rng = np.random.default_rng(g)
    cases = [rng.integers(-2, 3, g).astype(float), rng.integers(-3, 4, g) / rng.integers(1, 7, g),
             rng.integers(-1, 3, g).astype(float)]
    for d in cases:
        assert sign_flip_pvalue(d, 9999, seed) == _scipy_sign_flip(d, seed)
    assert sign_flip_pvalue(cases[0], 2500, seed, batch=700) == _scipy_sign_flip(cases[0], seed, 2500)


def test_repeating_turns_inside_a_query_does_not_make_a_difference_significant():
    a, b = [1, 1, 1, 0, 1, 0], [0, 0, 1, 1, 0, 0]
    base = clustered_paired_test(a, b, [1] * 6, range(6))
    copies = clustered_paired_test(np.repeat(a, 6), np.repeat(b, 6), [1] * 36, np.repeat(range(6), 6))
    assert copies["p"] == pytest.approx(base["p"]) and copies["n_clusters"] == 6
    assert stats.ttest_rel(np.repeat(a, 6), np.repeat(b, 6)).pvalue < 0.05 < copies["p"]


def test_holm_by_hand():
    adjusted = holm([0.01, 0.04, 0.03, float("nan"), 0.5])
    assert adjusted[:3] == pytest.approx([0.04, 0.09, 0.09]) and adjusted[4] == 0.5 and math.isnan(adjusted[3])


def _comparison_rows(n_queries, agent="clarify_agent"):
    """Turn-2 rows of n queries (one dialogue each): the agent asks (right), the others answer (wrong)."""
    rows = []
    for i in range(n_queries):
        for method in (agent, "base", "cot", "clarify_agent_no_planner"):
            rows.append({"dataset": "d", "subject": "s", "method": method, "query_id": f"q{i}",
                         "dialogue_id": f"q{i}-off_focus", "turn": 2, "persona": "off_focus", "subtype": "goal",
                         "reference_action": "clarify", "action": "clarify" if method == agent else "answer",
                         "status": "ok", "llm_calls": 1})
    return pl.DataFrame(rows)


def test_the_agent_is_tested_against_the_baselines_only_with_holm():
    cmp = method_comparison(_comparison_rows(8), min_n=5, channel="free_text").filter(pl.col("scope") == "turn_2")
    by = {r["method"]: r for r in cmp.to_dicts()}
    exact = 2 * 0.5 ** 8  # exact sign-flip test: 8 queries, all favour the agent
    for m in ("base", "cot"):
        assert by[m]["p_value"] == pytest.approx(exact) and by[m]["p_holm"] == pytest.approx(2 * exact)
        assert by[m]["significant"] is True and by[m]["correction"].startswith("holm over 2 baseline")
    ablation = by["clarify_agent_no_planner"]
    assert ablation["significant"] is None and ablation["p_holm"] is None
    assert ablation["correction"] == "not tested (not a baseline)" and ablation["diff_vs_reference"] == -1.0
    assert by["clarify_agent"]["agent_better_personas"] == ["off_focus"]
    assert set(cmp["decision_channel"]) == {"free_text"}


def test_significance_needs_min_n_paired_queries_not_rows():
    # 6 queries with 3 turn-2 rows each: 18 paired rows, but only 6 independent queries
    rows = _comparison_rows(6)
    many = pl.concat([rows.with_columns(dialogue_id=pl.col("dialogue_id") + f"-{k}") for k in range(3)])
    base = method_comparison(many, min_n=10).filter((pl.col("scope") == "turn_2") & (pl.col("method") == "base"))
    r = base.to_dicts()[0]
    assert (r["n_paired"], r["n_paired_queries"]) == (18, 6) and r["significant"] is False


def test_action_only_accuracy_is_the_default():
    assert EvaluationConfig().clarify_must_be_question is False
    df = pl.DataFrame({"reference_action": ["clarify", "clarify"], "action": ["clarify", "clarify"],
                       "status": ["ok", "ok"], "is_question": [True, False], "dialogue_id": ["a", "b"]})
    r = clarification_metrics(df, []).to_dicts()[0]
    assert r["accuracy"] == 1.0 and r["question_share"] == 0.5  # the question form stays a column of its own
    assert clarification_metrics(df, [], clarify_must_be_question=True).to_dicts()[0]["accuracy"] == 0.5


def test_token_f1_and_bertscore_average_over_every_reference_question_turn():
    """ClariLM §4.3 scores the model outputs against the reference clarification on every such item."""
    from dagster_project.core.clarifymt.judge import judge_scores
    from dagster_project.core.clarifymt.report import question_quality

    replies = [("clarify", "Which city are you flying from?"), ("answer", "Here is a plan."), ("invalid", None)]
    rows = [{"dataset": "d", "subject": "s", "method": "m", "dialogue_id": f"q{i}", "turn": 1, "subtype": "spatial",
             "persona": "precise", "reference_action": "clarify", "reference_question": "From which city do you fly?",
             "status": "ok" if a != "invalid" else "parse_error", "action": a, "response": r}
            for i, (a, r) in enumerate(replies)]
    messages = pl.DataFrame([{"dataset": "d", "dialogue_id": f"q{i}", "turn": 1,
                              "messages": [{"role": "user", "content": "Book a flight."}]} for i in range(3)])
    out = judge_scores(lambda role, reqs: [], pl.DataFrame(rows), messages, EvaluationConfig(judge_per_subtype=0),
                       "judge", lambda c, r: [0.9] * len(c)).sort("dialogue_id")
    assert out["token_f1"].to_list() == pytest.approx([0.5, 0.0, 0.0])  # {city, flying} vs {city, fly}
    assert out["bertscore_f1"].to_list() == pytest.approx([0.9, 0.9, 0.0])  # an empty output scores 0
    q = question_quality(out).to_dicts()[0]
    assert q["token_f1"] == pytest.approx(0.5 / 3) and q["token_f1_asked"] == pytest.approx(0.5)
    assert q["bertscore_f1"] == pytest.approx(0.6) and q["bertscore_f1_asked"] == pytest.approx(0.9)


@pytest.mark.parametrize("name", ["base", "majority_vote", "clarify_agent"])
def test_a_querys_shared_turn_1_is_sent_once(name):
    from dagster_project.core.clarifymt.agent.registry import build_method
    from tests.core.test_agent_methods import Chat, turn
    from tests.core.test_eval_format import _any_reply

    chat = Chat(_any_reply)
    turns = [turn(f"q1-{p}", 1) for p in PERSONAS]  # the same query opens all six persona dialogues
    preds = build_method(name, EvaluationConfig(vote_k=3)).predict(turns, chat)
    assert all(len(batch) == 1 for batch in chat.batches), [len(b) for b in chat.batches]
    assert len({(p.action, p.response) for p in preds}) == 1 and len(preds) == 6
