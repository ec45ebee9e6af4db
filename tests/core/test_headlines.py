"""The pure parts of the headline tables: verdict words, intents paired comparisons and table layout, double-turn
comparisons (F1 and DA accuracy), the fine-tuned re-ranker's runs at one depth and the ranker paired test."""

import numpy as np
import polars as pl

from dagster_project.core.double_turn.headline import comparisons, decision_correct
from dagster_project.core.intents.headline import headline_table, paired_comparisons
from dagster_project.core.retrieval.headline import finetuned_runs, images_sent, paired_mrr
from dagster_project.core.retrieval.rankers import RUN_SCHEMA
from dagster_project.defs.headlines.published import CLARIMM, DOUBLE_TURN_GAINS, INTENTS, verdict


def test_verdict_words():
    assert verdict(0, None, None, 0.05, 10).startswith("not compared")
    assert verdict(5, 0.4, 0.01, 0.05, 10) == "not significant: too few pairs (n=5 < 10) to tell"
    assert verdict(40, 0.2, 0.001, 0.05, 10) == "improved (diff +0.200, p=0.001, n=40)"
    assert verdict(40, -0.2, 0.001, 0.05, 10).startswith("not improved: significantly worse")
    assert verdict(40, 0.05, 0.3, 0.05, 10) == "not significant (diff +0.050, p=0.3, n=40)"
    assert verdict(40, 0.0, 1.0, 0.05, 10).startswith("not improved")


def test_published_numbers_carry_sources():
    assert DOUBLE_TURN_GAINS == {"f1_total": 5.0, "da_accuracy": 3.0}
    assert all(r["source"] for r in INTENTS + CLARIMM)
    mario = next(r for r in CLARIMM if r["ranker"] == "Mario" and r["input"] == "multi_turn")
    assert (mario["mrr"], mario["p_at_1"], mario["images"]) == (59.36, 48.10, True)


def _turns(subject, outcomes):
    rows = []
    for i, (kind, outcome) in enumerate(outcomes):
        rows.append({"subject": subject, "conversation_id": f"{subject}/test/c{i}", "kind": kind, "outcome": outcome,
                     "speaker": "assistant"})
    return rows


def test_intents_paired_comparison_counts_errors_apart():
    base = _turns("base", [("unambiguous", "wrong_intent"), ("unambiguous", "correct"), ("unambiguous", "llm_error"),
                           ("ood_dropout", "wrong_intent")])
    tuned = _turns("tuned", [("unambiguous", "correct"), ("unambiguous", "correct"), ("unambiguous", "correct"),
                             ("ood_dropout", "correct")])
    out = paired_comparisons(pl.DataFrame(base + tuned), ["tuned"], "base")
    ic = out.filter(pl.col("metric") == "ic_accuracy").row(0, named=True)
    assert (ic["n_paired"], ic["n_errors"], ic["diff"]) == (2, 1, 0.5)
    ood = out.filter(pl.col("metric") == "ood_dropout_accuracy").row(0, named=True)
    assert (ood["n_paired"], ood["diff"]) == (1, 1.0)
    assert paired_comparisons(pl.DataFrame(base), ["tuned"], None).is_empty()


def test_intents_headline_table_orders_systems_and_keeps_unserved_models():
    prompted = pl.DataFrame({"subject": ["smollm2"], "ic_accuracy": [0.5]})
    trained = pl.DataFrame({"subject": ["base", "tuned"], "ic_accuracy": [0.25, 1.0]})
    systems = {"base": {"system": "untuned_base", "percentile": None, "template": "t", "status": "ok", "reason": None},
               "tuned": {"system": "tuned", "percentile": 85.0, "template": "t", "status": "ok", "reason": None},
               "tuned_p65": {"system": "tuned", "percentile": 65.0, "template": "t", "status": "not_served",
                             "reason": "skipped_no_data"}}
    out = headline_table(prompted, trained, systems)
    assert out.select("subject", "system", "ic_accuracy").rows() == [
        ("smollm2", "prompted", 0.5), ("base", "untuned_base", 0.25), ("tuned", "tuned", 1.0),
        ("tuned_p65", "tuned", None)]


def _episode(subject, system, qid, f1, action="answer", amb=False, status="ok"):
    return {"subject": subject, "system": system, "query_id": qid, "f1": f1, "action": action, "is_ambiguous": amb,
            "status": status}


def test_double_turn_comparison_f1_and_decision_accuracy():
    rows = []
    for who, f1s, acts in (("dt", [1.0, 1.0, 0.5], ["answer", "clarify", "clarify"]),
                           ("st", [1.0, 0.0, 0.0], ["clarify", "answer", "answer"])):
        for q, (f1, act) in enumerate(zip(f1s, acts)):
            amb = q > 0
            rows.append(_episode(who, "clarify_or_direct", f"q{q}", f1, act, amb))
            rows.append(_episode(who, "direct_greedy", f"q{q}", 1.0 if q == 0 else 0.0, "answer", amb))
    rows.append(_episode("st", "clarify_or_direct", "q9", None, status="llm_error"))
    inter = pl.DataFrame(rows)
    assert decision_correct(inter, "dt") == {"q0": 1, "q1": 1, "q2": 1}
    assert decision_correct(inter, "st") == {"q0": 0, "q1": 0, "q2": 0}
    out = comparisons(inter, [("dt", "st"), ("dt", "missing")], "clarify_or_direct", 200, 0)
    assert out.height == 2  # the pair with an unevaluated side is left out
    f1 = out.filter(pl.col("metric") == "f1_total").row(0, named=True)
    assert (f1["n_paired"], f1["n_errors"]) == (3, 1) and abs(f1["diff"] - 0.5) < 1e-9
    da = out.filter(pl.col("metric") == "da_accuracy").row(0, named=True)
    assert (da["n_paired"], da["diff"], da["value"], da["ref_value"]) == (3, 1.0, 1.0, 0.0)


def _bm25_rows(qid, docs):
    return [{c: None for c in RUN_SCHEMA} | {"query_id": qid, "input": "multi_turn", "facet_id": "f", "ranker": "bm25",
                                            "modality": "text_only", "run_id": "bm25/multi_turn/text_only",
                                            "rank": r, "doc_id": d, "score": 10.0 - r, "stage": "first_stage",
                                            "query_text": "red shoes", "status": "ok", "n_turns": 2}
            for r, d in enumerate(docs, start=1)]


def test_finetuned_reranks_only_the_shared_depth():
    vec = {"red shoes": [1.0, 0.0], "blue hat": [0.0, 1.0], "red shoe shop": [0.9, 0.1], "hat": [0.1, 0.9]}

    def encode(texts):
        v = np.array([vec[t] for t in texts], dtype=float)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    bm25 = pl.DataFrame(_bm25_rows("q1", ["d_hat", "d_shop", "d_blue"]), schema=RUN_SCHEMA)
    texts = {"d_hat": "hat", "d_shop": "red shoe shop", "d_blue": "blue hat"}
    out = finetuned_runs(bm25, encode, texts, depth=2, model="ft")
    assert out["doc_id"].to_list() == ["d_shop", "d_hat", "d_blue"]  # top 2 re-ordered, rank 3 stays BM25's
    assert out["stage"].to_list() == ["dense", "dense", "first_stage"]
    assert set(out["ranker"]) == {"finetuned_rerank"} and set(out["model"]) == {"ft"} and out["rank"].to_list() == [1, 2, 3]
    assert finetuned_runs(bm25.clear(), encode, texts, 2, "ft").is_empty()


def test_paired_mrr_and_images_sent():
    pq = pl.DataFrame({"ranker": ["a", "a", "b", "b"], "input": ["m"] * 4, "modality": ["text_only"] * 4,
                       "query_id": ["q1", "q2", "q1", "q2"], "mrr": [1.0, 0.5, 0.5, 0.5]})
    t = paired_mrr(pq, "a", "b")
    assert t["n"] == 2 and t["diff"] == 0.25 and t["p"] is not None
    runs = pl.DataFrame({"run_id": ["g/m/multimodal", "g/m/multimodal"], "modality": ["multimodal"] * 2,
                         "query_id": ["q1", "q2"], "status": ["ok", "input_error"]})
    assert images_sent(runs, ["q1", "q2"]) == {"g/m/multimodal": 1}
