"""TRL-ready datasets (conversational ``messages`` for SFT, prompt / chosen / rejected for DPO)."""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from dagster_project.core.double_turn.answers import clarify_text, message
from dagster_project.core.double_turn.metrics import normalize_answer
from dagster_project.core.double_turn.simulation import SIMULATE, simulation_values


def sft_exports(sft: pl.DataFrame) -> dict[str, list[dict[str, Any]]]:
    """TRL conversational ``messages`` datasets built from clarify_sft.

    clarify_sft: x -> q (Clarify SFT); answer_after_clarify_sft: (x, q, a_i) -> y_i (the Turn-4 model);
    direct_answer_sft: x -> y_i for every feasible answer (Direct-Ans SFT); sft_dataset: the union of
    clarify and direct examples (the Clarify-or-Direct-Ans SFT set); user_simulator_sft: (x, q, y_i) -> a_i
    (the paper's User-simulator SFT, §4 and Appendix A.1), see :func:`user_simulator_sft`.
    """
    kept = sft.filter(pl.col("kept"))
    clar = [{"messages": [message("user", r["question"]),
                          message("assistant", clarify_text(r["clarifying_question"]))]}
            for r in kept.filter(pl.col("row_type") == "clarify").iter_rows(named=True)]
    after = [{"messages": [message("user", r["question"]),
                           message("assistant", clarify_text(r["clarifying_question"])),
                           message("user", r["user_reply"]), message("assistant", r["expected_answer"])]}
             for r in kept.filter(pl.col("row_type") == "answer").iter_rows(named=True)]
    direct, seen = [], set()
    for r in sft.filter(pl.col("row_type") == "answer").iter_rows(named=True):
        key = (r["question"], normalize_answer(r["expected_answer"]))
        if key not in seen:
            seen.add(key)
            direct.append({"messages": [message("user", r["question"]), message("assistant", r["expected_answer"])]})
    return {"clarify_sft": clar, "answer_after_clarify_sft": after, "direct_answer_sft": direct,
            "sft_dataset": clar + direct, "user_simulator_sft": user_simulator_sft(sft)}


def user_simulator_sft(sft: pl.DataFrame) -> list[dict[str, Any]]:
    """(x, q, y_i) -> a_i examples for fine-tuning a model to serve as the `user_simulator` role.

    The prompt is the one the role is called with (double_turn_user.txt) and the target is the JSON the
    role must return, so a model trained on this file can be put in the role unchanged. A usable reply
    gives ``{"reply": a_i, "abstain": false}``; a generator "none" (no clarifying answer points to y_i)
    gives ``{"reply": "", "abstain": true}``. Leaking replies and rows of unusable generator calls are left
    out: they would teach the simulator to give the answer away.
    """
    out = []
    for r in sft.filter((pl.col("row_type") == "answer") & (pl.col("status") == "ok")).iter_rows(named=True):
        if r["reason"] is None:
            target = {"reply": r["user_reply"], "abstain": False}
        elif r["reason"] == "no clarifying answer":
            target = {"reply": "", "abstain": True}
        else:
            continue
        msgs = list(SIMULATE.request(simulation_values(r)).messages)
        out.append({"messages": [*msgs, message("assistant", json.dumps(target, ensure_ascii=False))]})
    return out


def dpo_records(pairs: pl.DataFrame) -> list[dict[str, Any]]:
    """TRL conversational preference rows: prompt / chosen / rejected as message lists (kept pairs only)."""
    return [{"prompt": [message("user", r["question"])], "chosen": [message("assistant", r["chosen_text"])],
             "rejected": [message("assistant", r["rejected_text"])]}
            for r in pairs.filter(pl.col("kept")).iter_rows(named=True)]


def dpo_exports(pairs: pl.DataFrame) -> dict[str, list[dict[str, Any]]]:
    """Per labeling, the DPO dataset and its clarify-vs-clarify subset."""
    out = {}
    for labeling, stem in (("double_turn", "dpo_dataset"), ("single_turn", "dpo_single_turn")):
        sub = pairs.filter(pl.col("labeling") == labeling)
        out[stem] = dpo_records(sub)
        out[f"{stem}_clarify_only"] = dpo_records(sub.filter(pl.col("pair_type") == "clarify_vs_clarify"))
    return out
