"""TRL-ready datasets (conversational ``messages`` for SFT, prompt / chosen / rejected for DPO).

Every example is rendered from the template its system is evaluated with (system message included) and
its target is written in that system's output format (double_turn.subject_output), so a model trained on
an export sees at evaluation exactly the prompt it learned and is parsed the way it learned to reply:
clarify -> double_turn_subject_clarify, direct answers -> double_turn_subject_direct, clarify-or-direct
-> double_turn_subject_decide, answer after clarification -> double_turn_answer_after (the Turn-4 step),
user simulator -> double_turn_user (the label_simulator role).
"""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from dagster_project.io.status import Status
from dagster_project.core.double_turn.answers import (
    ANSWER_AFTER,
    CLARIFY_MARK,
    clarify_text,
    message,
)
from dagster_project.core.double_turn.evaluation import subject_task
from dagster_project.core.double_turn.metrics import normalize_answer
from dagster_project.core.double_turn.simulation import SIMULATE, simulation_values
from dagster_project.llm.chat import Message


def turn2_prompt(system: str, question: str, output: str) -> list[Message]:
    """The messages a subject gets at turn 2 under one system (the same request turn2_asks sends)."""
    return list(subject_task(system, output).request({"question": question}).messages)


def turn2_target(system: str, output: str, action: str, text: str) -> str:
    """What the system should reply at turn 2, in its output format: the answer, or the clarifying question."""
    if output == "json":
        if system == "clarify_or_direct":
            obj: dict[str, str] = {"action": "clarify" if action == "clarify" else "answer", "text": text}
        else:
            obj = {"clarifying_question": text} if action == "clarify" else {"answer": text}
        return json.dumps(obj, ensure_ascii=False)
    return clarify_text(text) if action == "clarify" else text


def turn2_example(system: str, output: str, question: str, action: str, text: str) -> dict[str, Any]:
    """One SFT example of a turn-2 system: its evaluation prompt and the target reply."""
    return {"messages": [*turn2_prompt(system, question, output),
                         message("assistant", turn2_target(system, output, action, text))]}


def answer_after_example(question: str, clarifying_question: str, reply: str, answer: str) -> dict[str, Any]:
    """(x, q, a_i) -> y_i as the Turn-4 step is asked (double_turn_answer_after, JSON answer)."""
    msgs = ANSWER_AFTER.request({"question": question, "clarifying_question": clarifying_question,
                                 "reply": reply}).messages
    return {"messages": [*msgs, message("assistant", json.dumps({"answer": answer}, ensure_ascii=False))]}


def sft_exports(sft: pl.DataFrame, output: str) -> dict[str, list[dict[str, Any]]]:
    """TRL conversational ``messages`` datasets built from the kept rows of clarify_sft.

    clarify_sft: x -> q (Clarify SFT); answer_after_clarify_sft: (x, q, a_i) -> y_i (the Turn-4 model);
    direct_answer_sft: x -> y_i for every kept (x, q, a_i, y_i) example (Direct-Ans SFT); sft_dataset: the
    clarify and direct examples in the Clarify-or-Direct prompt (its SFT set); user_simulator_sft:
    (x, q, y_i) -> a_i (the paper's User-simulator SFT, §4 and Appendix A.1), see :func:`user_simulator_sft`.
    """
    kept = sft.filter(pl.col("kept"))
    clar_rows = kept.filter(pl.col("row_type") == "clarify").iter_rows(named=True)
    clar = [(r["question"], r["clarifying_question"]) for r in clar_rows]
    answers = list(kept.filter(pl.col("row_type") == "answer").iter_rows(named=True))
    after = [answer_after_example(r["question"], r["clarifying_question"], r["user_reply"], r["expected_answer"])
             for r in answers]
    direct, seen = [], set()
    for r in answers:
        key = (r["question"], normalize_answer(r["expected_answer"]))
        if key not in seen:
            seen.add(key)
            direct.append((r["question"], r["expected_answer"]))
    return {
        "clarify_sft": [turn2_example("clarify", output, x, "clarify", q) for x, q in clar],
        "answer_after_clarify_sft": after,
        "direct_answer_sft": [turn2_example("direct_greedy", output, x, "answer", y) for x, y in direct],
        "sft_dataset": [turn2_example("clarify_or_direct", output, x, "clarify", q) for x, q in clar]
        + [turn2_example("clarify_or_direct", output, x, "answer", y) for x, y in direct],
        "user_simulator_sft": user_simulator_sft(sft),
    }


def user_simulator_sft(sft: pl.DataFrame) -> list[dict[str, Any]]:
    """(x, q, y_i) -> a_i examples for fine-tuning a model to serve as the `label_simulator` role.

    The prompt is the one the role is called with (double_turn_user.txt) and the target is the JSON the
    role must return, so a model trained on this file can be put in the role unchanged. A usable reply
    gives ``{"reply": a_i, "abstain": false}`` (also when too few answers were kept for a Clarify SFT
    example: the reply is still a good simulator target); an answer the generator left out ("none": no clarifying
    answer points to y_i) gives ``{"reply": "", "abstain": true}``. Leaking replies, declined queries and
    rows of unusable generator calls are left out: they would teach the simulator to give the answer away
    or have no clarifying question.
    """
    out = []
    for r in sft.filter((pl.col("row_type") == "answer") & (pl.col("status") == Status.OK)).iter_rows(named=True):
        if r["reason"] in (None, "example dropped"):  # a usable reply, even where the SFT example was dropped
            target = {"reply": r["user_reply"], "abstain": False}
        elif r["reason"] == "no clarifying answer" and r["clarifying_question"]:
            target = {"reply": "", "abstain": True}
        else:
            continue
        msgs = list(SIMULATE.request(simulation_values(r)).messages)
        out.append({"messages": [*msgs, message("assistant", json.dumps(target, ensure_ascii=False))]})
    return out


def _action_text(kind: str, text: str) -> tuple[str, str]:
    """(action, bare text) of a candidate: a clarifying candidate's text without the phi prefix."""
    if kind == "clarify":
        return "clarify", text[len(CLARIFY_MARK):].strip() if text.startswith(CLARIFY_MARK) else text
    return "answer", text


def dpo_records(pairs: pl.DataFrame, system: str, output: str) -> list[dict[str, Any]]:
    """TRL conversational preference rows (kept pairs only): the system's turn-2 prompt, and the chosen and
    rejected replies in its output format."""
    out = []
    for r in pairs.filter(pl.col("kept")).iter_rows(named=True):
        sides = {s: turn2_target(system, output, *_action_text(r[f"{s}_kind"], r[f"{s}_text"]))
                 for s in ("chosen", "rejected")}
        out.append({"prompt": turn2_prompt(system, r["question"], output),
                    "chosen": [message("assistant", sides["chosen"])],
                    "rejected": [message("assistant", sides["rejected"])]})
    return out


def dpo_exports(pairs: pl.DataFrame, output: str) -> dict[str, list[dict[str, Any]]]:
    """Per labeling: every pair in the Clarify-or-Direct prompt (its DPO set) and the clarify-vs-clarify
    subset in the Clarify prompt (Clarify DPO)."""
    out = {}
    for labeling, stem in (("double_turn", "dpo_dataset"), ("single_turn", "dpo_single_turn")):
        sub = pairs.filter(pl.col("labeling") == labeling)
        out[stem] = dpo_records(sub, "clarify_or_direct", output)
        out[f"{stem}_clarify_only"] = dpo_records(sub.filter(pl.col("pair_type") == "clarify_vs_clarify"),
                                                  "clarify", output)
    return out
