"""ClariLM Table 2's SFT baselines: SFT rows from a public clarification dataset (IN3, ClariQ, CLAMBER, generic) in
ClariLM's template (SFT-IN3; with sft_dataset, SFT-Full), and the rows each baseline trains on.

Labels come from the dataset: a clarify turn -> "Need clarification: yes" + the dataset's clarifying question; an
answer turn -> "Need clarification: no" + an answer. The importers give no answer text (IN3 and ClariQ have none),
so the `answerer` role writes it, as CoTAP does for a logged question without an answer (annotations.py).
A turn is not kept (row stays, `kept` false, `reason`) when its dialogue's first question is an evaluation query
(exact after normalising; the held_out_disjoint check also catches near-duplicates), when a clarify turn has no
clarifying question, or when the answerer failed.
"""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from dagster_project.core.clarilm.annotations import ANSWER, MESSAGE, format_response
from dagster_project.core.training.overlap import normalize_query
from dagster_project.llm.task import Chat, Status

SFT_EXTERNAL_SCHEMA = {
    "id": pl.Utf8, "dataset": pl.Utf8, "dialogue_id": pl.Utf8, "turn": pl.Int64, "record": pl.Int64,
    "source_file": pl.Utf8, "question": pl.Utf8, "decision": pl.Utf8, "target_origin": pl.Utf8,
    "question_source": pl.Utf8, "messages": pl.List(MESSAGE), "kept": pl.Boolean, "reason": pl.Utf8,
    "status": pl.Utf8, "error": pl.Utf8, "raw_output": pl.Utf8, "model": pl.Utf8, "prompt_version": pl.Utf8,
}


NO_CALL = {"status": Status.OK.value, "error": None, "raw_output": None, "model": None, "prompt_version": None}


def first_questions(turns: pl.DataFrame) -> pl.DataFrame:
    """(dataset, dialogue_id, query): each dialogue's first user message."""
    first = turns.sort("turn").group_by("dataset", "dialogue_id", maintain_order=True).first()
    return first.select("dataset", "dialogue_id", pl.col("messages").list.first().struct.field("content")
                        .alias("query"))


def external_sft_rows(chat: Chat, turns: pl.DataFrame, system_prompt: str, held_out: Iterable[str],
                      answer_max_tokens: int) -> pl.DataFrame:
    """One row per imported turn (TURN_SCHEMA): its SFT `messages` ([system], the dialogue, the target) and whether
    it is kept. `held_out`: the evaluation queries a kept row's first question must not equal (normalised)."""
    evaluated = {normalize_query(q) for q in held_out if q}
    queries = {(r["dataset"], r["dialogue_id"]): r["query"] for r in first_questions(turns).iter_rows(named=True)}
    rows = turns.sort("dataset", "dialogue_id", "turn").to_dicts()
    for r in rows:
        r["question"] = (r["messages"] or [{}])[-1].get("content")
        q = queries.get((r["dataset"], r["dialogue_id"]))
        r["reason"] = ("in_evaluation_set" if q and normalize_query(q) in evaluated
                       else "no_reference_question" if r["reference_action"] == "clarify"
                       and not (r["reference_question"] or "").strip()
                       else None if r["reference_action"] in ("clarify", "answer") else "no_reference_action")
    need = [r for r in rows if r["reason"] is None and r["reference_action"] == "answer"]
    outcomes = ANSWER.run(chat, need, lambda r: {"question": r["question"]},
                          lambda _: {"max_tokens": answer_max_tokens})
    answered = {id(r): o for r, o in zip(need, outcomes, strict=True)}
    out = []
    for r in rows:
        o = answered.get(id(r))
        target, origin, reason = None, None, r["reason"]
        if reason is None and r["reference_action"] == "clarify":
            target, origin = format_response("clarify", r["reference_question"]), "dataset"
        elif o is not None and o.ok:
            target, origin = format_response("answer", o.value.answer), "answerer"
        elif o is not None:
            reason = "answer_failed"
        history = [{"role": m["role"], "content": m["content"]} for m in r["messages"] or []]
        system = [{"role": "system", "content": system_prompt}] if system_prompt.strip() else []
        out.append({
            "id": f"{r['dataset']}:{r['dialogue_id']}:{r['turn']}", "dataset": r["dataset"],
            "dialogue_id": r["dialogue_id"], "turn": r["turn"], "record": r["record"], "source_file": r["source"],
            "question": r["question"], "decision": {"clarify": "ask", "answer": "answer"}.get(r["reference_action"]),
            "target_origin": origin, "question_source": f"external:{r['dataset']}",
            "messages": [*system, *history, {"role": "assistant", "content": target}] if target else None,
            "kept": target is not None, "reason": reason,
            **(o.provenance() if o is not None else NO_CALL)})
    return pl.DataFrame(out, schema=SFT_EXTERNAL_SCHEMA)


def baseline_rows(name: str, sft_dataset: pl.DataFrame | None, sft_external: pl.DataFrame | None) -> list[dict]:
    """The `messages` records one SFT baseline trains on: clarilm_sft_external the kept imported rows (SFT-IN3),
    clarilm_sft_ql the sft_dataset rows whose question comes from the logs (Q^L, no Q^G), clarilm_sft_full every
    sft_dataset row plus the kept imported ones (Q^L + Q^G + IN3, no DPO)."""
    frames = []
    if sft_dataset is not None:
        frames.append(sft_dataset.filter(pl.col("question_source") == "log") if name == "clarilm_sft_ql"
                      else sft_dataset)
    if sft_external is not None:
        frames.append(sft_external.filter(pl.col("kept")))
    return [r for f in frames if f.height for r in f.select("messages").to_dicts()]
