"""Trained subjects vs their reference on a hand-made prediction table: numbers, paired test, verdict words, the
report's "Trained models" section, clarify-class F1, and the held-out overlap pairs (exact and near-duplicate)."""

import numpy as np
import polars as pl
import pytest

from dagster_project.core.clarifymt.report import trained_section
from dagster_project.core.shared.metrics import clarify_f1
from dagster_project.core.clarifymt.trained import trained_comparison
from dagster_project.core.training.overlap import (
    held_out_overlaps,
    normalize_query,
    record_user_texts,
    user_texts,
)
from dagster_project.core.shared.metrics import decision_macro_f1

N = 12


def _rows(subject: str, correct: int, dataset: str = "clarifymt", method: str = "base") -> list[dict]:
    """N turns whose reference alternates clarify / answer; the first `correct` are right, the rest answered."""
    out = []
    for i in range(N):
        ref = "clarify" if i % 2 == 0 else "answer"
        act = ref if i < correct else ("answer" if ref == "clarify" else "clarify")
        out.append({"dataset": dataset, "subject": subject, "method": method, "dialogue_id": f"d{i}", "turn": 1,
                    "action": act, "reference_action": ref, "status": "ok", "is_question": True,
                    "protocol_ok": 1.0 if i < correct else 0.0, "llm_calls": 1})
    return out


PRED = pl.DataFrame(_rows("base_hf", 1) + _rows("sft", 12) + _rows("dpo", 1) + _rows("sft", 0, method="cot"))


def test_trained_model_that_improves_and_one_that_does_not():
    quality = pl.DataFrame({"dataset": ["clarifymt"], "subject": ["sft"], "method": ["base"],
                            "judge_score": [4.0], "judge_n": [3]}, schema_overrides={"judge_n": pl.UInt32})
    t = trained_comparison(PRED, [("sft", "base_hf"), ("dpo", "base_hf"), ("sft", "missing")], quality=quality)
    assert t["subject"].to_list() == ["sft", "dpo"]  # a pair without predictions is left out
    sft, dpo = t.row(0, named=True), t.row(1, named=True)
    assert (sft["n"], sft["accuracy"], sft["ref_accuracy"], sft["n_paired"]) == (12, 1.0, 1 / 12, 12)
    assert sft["protocol_compliance"] == 1.0 and sft["macro_f1"] == 1.0 and sft["judge_score"] == 4.0
    assert sft["ref_under_clarification"] == 5 / 12 and sft["ref_over_clarification"] == 6 / 12
    assert sft["accuracy_ci_low"] < 1.0 and sft["test"] == "sign_flip" and sft["p_value"] < 0.01  # 12 queries (one turn each)
    assert sft["significant"] and sft["verdict"] == "improved"
    assert dpo["diff"] == 0.0 and not dpo["significant"] and "does not improve" in dpo["verdict"]
    few = trained_comparison(PRED, [("sft", "base_hf")], min_n=20).row(0, named=True)
    assert not few["significant"] and few["verdict"].startswith("too few paired turns (12 < 20)")
    worse = trained_comparison(PRED, [("base_hf", "sft")]).row(0, named=True)
    assert worse["verdict"] == "worse"


def test_report_section_says_plainly_which_model_did_not_improve():
    text = "\n".join(trained_section(trained_comparison(PRED, [("sft", "base_hf"), ("dpo", "base_hf")])))
    assert text.startswith("## Trained models")
    assert "**sft** vs base_hf on clarifymt (base, 12 paired turns): improved" in text
    assert "**dpo** vs base_hf on clarifymt (base, 12 paired turns): no significant difference: does not improve" in text
    assert "100.0 [75.8-100.0]" in text  # accuracy with its Wilson CI
    assert trained_section(None) == [] and trained_section(trained_comparison(PRED, [])) == []


def test_an_improvement_at_the_majority_rate_is_called_out():
    """The loop's IN3 case: most items need a question and the trained model always asks. Significantly better than
    a base that always answers, but no better than always asking, and the verdict says so."""
    refs = ["clarify"] * 18 + ["answer"] * 2
    rows = [{"dataset": "in3", "subject": who, "method": "base", "dialogue_id": f"d{i}", "turn": 1,
             "action": act, "reference_action": ref, "status": "ok", "is_question": True, "protocol_ok": 1.0,
             "llm_calls": 1} for i, ref in enumerate(refs) for who, act in (("sft", "clarify"), ("base_hf", "answer"))]
    r = trained_comparison(pl.DataFrame(rows), [("sft", "base_hf")]).row(0, named=True)
    assert r["significant"] and r["accuracy"] == 0.9 and r["ref_accuracy"] == 0.1
    assert (r["majority_action"], r["majority_accuracy"]) == ("clarify", 0.9)
    assert r["verdict"].startswith("improved over the reference, but not above always answering 'clarify' (90.0%)")
    better = trained_comparison(PRED, [("sft", "base_hf")]).row(0, named=True)  # 12/12 right on a 50/50 set
    assert better["majority_accuracy"] == 0.5 and better["verdict"] == "improved"


def test_report_section_with_one_paired_turn_has_no_ci():
    """One paired turn: a difference but no bootstrap CI (the cold demo of 2026-11-27 crashed the report here)."""
    one = PRED.filter(pl.col("dialogue_id") == "d0")
    t = trained_comparison(one, [("sft", "base_hf")])
    assert t["diff_ci_low"].to_list() == [None] and t["diff"].to_list() == [0.0]
    text = "\n".join(trained_section(t))
    assert "+0.0 [no CI]" in text and "1 paired turns" in text


def test_clarify_f1_is_the_clarify_class_f1_and_macro_f1_stays_beside_it():
    t = trained_comparison(PRED, [("sft", "base_hf")]).row(0, named=True)
    assert t["clarify_f1"] == 1.0 and t["ref_clarify_f1"] == pytest.approx(2 / 13)  # 1 TP, 6 FP, 5 FN
    assert t["ref_macro_f1"] == pytest.approx(1 / 13)  # the answer class scores 0
    # IN3-like: 90% accuracy when most queries need clarification gives a clarify-class F1 of 94, macro-F1 80
    ref = ["clarify"] * 80 + ["answer"] * 20
    got = ["clarify"] * 80 + ["clarify"] * 10 + ["answer"] * 10
    assert clarify_f1(ref, got) == pytest.approx(160 / 170)
    assert decision_macro_f1(ref, got) < clarify_f1(ref, got) - 0.1


def _fake_encode(texts):
    """Unit vectors: texts that start with the same word point the same way (a planted near-duplicate)."""
    words = ["where", "book", "cafe", "how", "unrelated", "what"]
    out = np.zeros((len(texts), len(words) + 1))
    for i, t in enumerate(texts):
        first = t.lower().split()[0]
        out[i, words.index(first) if first in words else len(words)] = 1.0
    return out


def test_held_out_overlaps_names_exact_and_near_pairs():
    msg = pl.List(pl.Struct({"role": pl.Utf8, "content": pl.Utf8}))
    sft = pl.DataFrame({"messages": [[{"role": "system", "content": "Where is Paris?"},
                                      {"role": "user", "content": "Where  is PARIS?!"},
                                      {"role": "assistant", "content": "In France."}]]}, schema={"messages": msg})
    intents = pl.DataFrame({"messages": [[{"role": "user", "content": "book a table"}]] * 2, "kept": [False, False]},
                           schema={"messages": msg, "kept": pl.Boolean})
    jsonl = [{"prompt": [{"role": "user", "content": "How do I bake bread"}], "chosen": [], "rejected": []}]
    exports = {"annotations/sft_dataset": user_texts(sft), "intents/training_conversations": user_texts(intents),
               "double_turn/training_exports:dpo_dataset": record_user_texts(jsonl)}
    assert exports["intents/training_conversations"] == []  # rows a `kept` column drops are not trained on
    pairs = held_out_overlaps(["where is paris", "Book a table", "how can I bake bread?", "unrelated"], exports,
                              _fake_encode, 0.9)
    assert pairs.select("export", "query", "training_text", "match").rows() == [
        ("annotations/sft_dataset", "where is paris", "Where  is PARIS?!", "exact"),
        ("double_turn/training_exports:dpo_dataset", "how can I bake bread?", "How do I bake bread", "near")]
    assert held_out_overlaps(["unrelated"], exports, _fake_encode, 0.9).is_empty()
    assert normalize_query("  What's the   time? ") == "whats the time"
