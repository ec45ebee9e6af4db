"""Method-comparison metrics (core/metrics.py, ClarifyMT-Bench Tables 3-6 and ClariLM text metrics), by hand."""

import math

import polars as pl
import pytest
from scipy import stats

from dagster_project.core.clarifymt.metrics import evaluation_tables, method_comparison, persona_spread
from dagster_project.core.shared.metrics import (
    bertscore_f1, content_tokens, decision_macro_f1, paired_significance, token_f1, win_tie_lose,
)


def test_persona_spread_reproduces_the_papers_table6_row():
    # ClarifyAgent (Qwen-2.5-7B) in Table 6: P 85.3, PV 85.8, OF 97.3, CT 91.7, FA 84.0, RF 83.9 -> Avg 88.0, Std 4.92
    avg, std = persona_spread([85.3, 85.8, 97.3, 91.7, 84.0, 83.9])
    assert avg == pytest.approx(88.0)
    assert round(std, 2) == 4.92  # population std (ddof=0); the sample std would be 5.39
    assert all(math.isnan(x) for x in persona_spread([]))


def test_paired_significance_by_hand():
    a = [1, 1, 1, 0, 1, 1]
    b = [0, 0, 1, 0, 0, 1]
    # d = [1, 1, 0, 0, 1, 0]: mean 0.5, sample sd sqrt(6 * 0.25 / 5) = sqrt(0.3), t = 0.5 / (sqrt(0.3) / sqrt(6)) = sqrt(5)
    r = paired_significance(a, b)
    assert r["t"] == pytest.approx(math.sqrt(5))
    assert r["p_ttest"] == pytest.approx(2 * stats.t.sf(math.sqrt(5), df=5))
    # McNemar exact: 3 pairs where only a is right, 0 where only b is: p = 2 * 0.5^3 = 0.25
    assert (r["a_only"], r["b_only"], r["p_mcnemar"]) == (3, 0, pytest.approx(0.25))
    assert r["n"] == 6 and r["mean_diff"] == 0.5


def test_paired_significance_degenerate_cases():
    same = paired_significance([1, 0, 1], [1, 0, 1])
    assert same["p_ttest"] == 1.0 and same["p_mcnemar"] == 1.0
    always = paired_significance([1, 1, 1, 1], [0, 0, 0, 0])  # constant non-zero difference: t undefined
    assert math.isnan(always["p_ttest"]) and always["p_mcnemar"] == pytest.approx(2 * 0.5 ** 4)
    assert always["test"] == "mcnemar_exact" and always["p"] == always["p_mcnemar"]
    assert paired_significance([], [])["p_ttest"] == 1.0
    with pytest.raises(ValueError):
        paired_significance([1], [1, 0])


def test_decision_macro_f1_by_hand():
    ref = ["clarify", "clarify", "clarify", "answer"]
    pred = ["clarify", "answer", "invalid", "answer"]
    # clarify: TP 1, FP 0, FN 2 -> F1 = 2/(2+0+2) = 0.5; answer: TP 1, FP 1, FN 0 -> F1 = 2/3
    assert decision_macro_f1(ref, pred) == pytest.approx((0.5 + 2 / 3) / 2)


def test_token_f1_removes_stopwords():
    assert content_tokens("Which city are you flying from?") == ["city", "flying"]
    # {city, flying} vs {city, depart}: P = R = 1/2 -> F1 = 0.5
    assert token_f1("Which city are you flying from?", "From which city do you depart?") == pytest.approx(0.5)
    # repeated tokens count with multiplicity: cand [paris, paris, france], ref [paris] -> P 1/3, R 1 -> F1 0.5
    assert token_f1("Paris, Paris, France?", "Paris") == pytest.approx(0.5)
    assert token_f1("Is it?", "What is it?") == 1.0  # only stopwords on both sides
    assert token_f1("Which bass?", "") == 0.0 and token_f1("bass guitar", "sea bass") == pytest.approx(0.5)


def test_bertscore_passes_the_local_model_and_layers():
    seen = {}

    def fake_score(cands, refs, **kw):
        seen.update(kw, cands=cands, refs=refs)
        return [0.1, 0.2], [0.3, 0.4], [0.5, 0.25]

    out = bertscore_f1(["a", "b"], ["c", "d"], "/models/minilm", 6, score_fn=fake_score)
    assert out == [0.5, 0.25]
    assert seen["model_type"] == "/models/minilm" and seen["num_layers"] == 6 and seen["cands"] == ["a", "b"]
    assert bertscore_f1([], [], "/x", score_fn=fake_score) == []
    with pytest.raises(ValueError):
        bertscore_f1(["a"], [], "/x", score_fn=fake_score)


def test_bertscore_scores_in_chunks_and_keeps_the_order():
    """bert_score holds every sentence's token embeddings until a call ends: pairs go in bounded chunks, those
    sharing a reference in the same chunk (it is encoded once per call), and come back in input order."""
    calls = []

    def fake_score(cands, refs, **kw):
        calls.append(sorted(set(refs)))
        return None, None, [float(c) + float(r) / 100 for c, r in zip(cands, refs, strict=True)]

    cands = ["5", "1", "2", "6", "3", "4", "0"]
    refs = ["9", "8", "9", "8", "9", "7", "8"]
    out = bertscore_f1(cands, refs, "/m", score_fn=fake_score, chunk=3)
    assert calls == [["7", "8"], ["8", "9"], ["9"]]  # sorted by reference: 7 once, 8 x3, 9 x3
    assert out == pytest.approx([float(c) + float(r) / 100 for c, r in zip(cands, refs, strict=True)])


def test_win_tie_lose():
    assert win_tie_lose(["win", "win", "tie", "lose"]) == {"n": 4, "win": 0.5, "tie": 0.25, "lose": 0.25}
    with pytest.raises(ValueError):
        win_tie_lose(["draw"])


def _pred():
    """Two methods on 4 dialogues (P and RF: 2 turns; PV, OF: 3 turns) -> 10 turns each."""
    refs = {"precise": ["clarify", "answer"], "refusal": ["clarify", "answer"],
            "partial_vague": ["clarify", "clarify", "answer"], "off_focus": ["clarify", "clarify", "answer"]}
    # agent: right everywhere except off_focus turn 3; base: answers from turn 2 on (under-clarifies PV/OF t2)
    rows = []
    for persona, ref in refs.items():
        for t, r in enumerate(ref, start=1):
            agent = "clarify" if (persona, t) == ("off_focus", 3) else r  # over-clarifies once
            base = "clarify" if t == 1 else "answer"
            for method, act, calls in (("agent", agent, 5 if t > 1 else 4), ("base", base, 1)):
                rows.append({"dataset": "d", "subject": "s", "method": method, "dialogue_id": persona, "turn": t,
                             "persona": persona, "subtype": "lexical", "reference_action": r, "action": act,
                             "llm_calls": calls})
    return pl.DataFrame(rows)


def test_method_comparison_by_hand():
    cmp = method_comparison(_pred(), agent="agent", comparison_turn=2)
    assert set(cmp["scope"]) == {"turn_2", "all_turns"}
    t2 = {r["method"]: r for r in cmp.filter(pl.col("scope") == "turn_2").to_dicts()}
    # turn 2: agent right on all 4; base right on P and RF (answer), wrong on PV and OF (clarify expected)
    assert t2["agent"]["accuracy"] == 1.0 and t2["base"]["accuracy"] == 0.5
    assert (t2["base"]["precise"], t2["base"]["partial_vague"], t2["base"]["contradictory"]) == (1.0, 0.0, None)
    assert t2["base"]["persona_avg"] == 0.5 and t2["base"]["persona_std"] == pytest.approx(0.5)
    assert t2["base"]["under_clarification"] == 0.5 and t2["agent"]["calls_per_turn"] == 5.0
    # paired over the 4 turn-2 rows: d = [0, 0, 1, 1] -> t = 0.5 / (sqrt(1/3) / 2) = sqrt(3)
    assert t2["base"]["p_ttest"] == pytest.approx(2 * stats.t.sf(math.sqrt(3), df=3))
    # exact sign-flip test over the 4 dialogues (no query_id: each dialogue is its own cluster): 2 discordant
    assert t2["base"]["p_sign_flip"] == pytest.approx(0.5) and t2["base"]["reference_method"] == "agent"
    assert t2["agent"]["p_ttest"] is None
    allt = {r["method"]: r for r in cmp.filter(pl.col("scope") == "all_turns").to_dicts()}
    assert allt["agent"]["accuracy"] == pytest.approx(9 / 10) and allt["base"]["accuracy"] == pytest.approx(8 / 10)
    assert allt["agent"]["calls_per_turn"] == pytest.approx((4 * 4 + 6 * 5) / 10)
    assert allt["agent"]["over_clarification"] == pytest.approx(1 / 10)
    # macro-F1 of base over all turns: clarify TP 4 FP 0 FN 2 -> 0.8; answer TP 4 FP 2 FN 0 -> 0.8
    assert allt["base"]["macro_f1"] == pytest.approx(0.8)
    quality = pl.DataFrame({"dataset": ["d"], "subject": ["s"], "method": ["agent"], "judge_score": [4.0]})
    with_q = method_comparison(_pred(), agent="agent", quality=quality)
    assert with_q.filter(pl.col("method") == "agent")["judge_score"].to_list() == [4.0, 4.0]
    assert with_q.filter(pl.col("method") == "base")["judge_score"].null_count() == 2


def test_agent_better_personas_needs_significance():
    rows = []
    for i in range(10):  # 10 off_focus dialogues at turn 2: agent right on all, base wrong on all
        for method, act in (("agent", "clarify"), ("base", "answer")):
            rows.append({"dataset": "d", "subject": "s", "method": method, "dialogue_id": f"x{i}", "turn": 2,
                         "persona": "off_focus", "subtype": "goal", "reference_action": "clarify", "action": act,
                         "llm_calls": 1})
    cmp = method_comparison(pl.DataFrame(rows), agent="agent").filter(pl.col("scope") == "turn_2")
    by = {r["method"]: r for r in cmp.to_dicts()}
    assert by["base"]["agent_better_personas"] == ["off_focus"] and by["agent"]["agent_better_personas"] == ["off_focus"]


def test_evaluation_tables_adds_dataset_and_persona_turn():
    t = evaluation_tables(_pred())
    assert t.columns[:4] == ["breakdown", "dataset", "subject", "method"]
    pt = t.filter((pl.col("breakdown") == "by_persona_turn") & (pl.col("method") == "base") & (pl.col("turn") == 2))
    assert dict(zip(pt["persona"], pt["accuracy"])) == {"off_focus": 0.0, "partial_vague": 0.0, "precise": 1.0,
                                                          "refusal": 1.0}
    overall = t.filter(pl.col("breakdown") == "overall")
    assert overall["n"].to_list() == [10, 10]
