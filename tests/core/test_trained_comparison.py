"""Trained subjects vs their reference on a hand-made prediction table: numbers, paired test, verdict words, the
report's "Trained models" section, and the held-out overlap count."""

import polars as pl

from dagster_project.core.clarifymt.report import trained_section
from dagster_project.core.clarifymt.trained import (
    normalize_query,
    query_overlap,
    trained_comparison,
)

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
    assert sft["accuracy_ci_low"] < 1.0 and sft["test"] == "mcnemar_exact" and sft["p_value"] < 0.01
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


def test_query_overlap_on_normalized_user_messages():
    msg = pl.List(pl.Struct({"role": pl.Utf8, "content": pl.Utf8}))
    sft = pl.DataFrame({"messages": [[{"role": "system", "content": "Where is Paris?"},
                                      {"role": "user", "content": "Where  is PARIS?!"},
                                      {"role": "assistant", "content": "In France."}]]}, schema={"messages": msg})
    intents = pl.DataFrame({"messages": [[{"role": "user", "content": "book a table"}]] * 2, "kept": [False, False]},
                           schema={"messages": msg, "kept": pl.Boolean})
    dpo = pl.DataFrame({"prompt": [[{"role": "user", "content": "Café hours"}]]}, schema={"prompt": msg})
    got = query_overlap(["where is paris", "Book a table", "cafe hours?", "unrelated"],
                        {"annotations/sft_dataset": sft, "intents/training_conversations": intents,
                         "annotations/dpo_dataset": dpo})
    assert got == {"annotations/sft_dataset": 1, "intents/training_conversations": 0, "annotations/dpo_dataset": 1}
    assert normalize_query("  What's the   time? ") == "whats the time"
