"""DPO candidates sampled from the SFT model (§4.1: "response pairs ... sampled from Clarify SFT model").

The SFT model (training/double_turn_sft) learned the Clarify-or-Direct prompt, so it is asked in that prompt and
reply format only: one greedy reply (T=0) and double_turn.n_clarify_sampled sampled ones (clarify_temperature; the
paper: one greedy + five at T=1.0). Each reply is read as the model meant it (phi, or its JSON action): a clarifying
question or a direct answer. One direct answer per query enters the pairs (the paper pairs the clarifying questions
with a single greedy direct answer): the greedy reply when it answers, else the first sampled answer.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from dagster_project.config import DoubleTurnConfig
from dagster_project.core.double_turn.answers import clarify_text
from dagster_project.core.double_turn.candidates import candidate_row, candidate_table, sampling_items
from dagster_project.core.double_turn.evaluation import parse_turn2, subject_reply_text, subject_task
from dagster_project.llm.task import Chat, Outcome, Status, ask_all

SFT_SYSTEM = "clarify_or_direct"  # the prompt the double_turn sft_dataset export (and so the SFT model) is in


def _reply_row(o: Outcome[dict[str, Any], Any], output: str) -> dict[str, Any]:
    """A candidate row of one SFT reply: a clarifying question or a direct answer; a failed call or a reply that
    is neither is kind `unusable`, out of the pairs with the reason."""
    k = o.sample + (0 if o.item["decoding"] == "greedy" else 1)
    cid = f"{o.item['query_id']}:r{k}"
    if o.status is Status.LLM_ERROR:
        return candidate_row(o, cid, "unusable")
    turn = parse_turn2(subject_reply_text(SFT_SYSTEM, o.raw_output or "", output))
    if not o.ok or turn["status"] != Status.OK.value:
        why = o.error if not o.ok else turn["error"]
        return candidate_row(o, cid, "unusable", in_pairs=False, status=Status.PARSE_ERROR.value, error=why,
                             reason=f"parse_error: {why}")
    if turn["action"] == "clarify":
        return candidate_row(o, cid, "clarify", clarifying_question=turn["clarifying_question"],
                             text=clarify_text(turn["clarifying_question"]))
    return candidate_row(o, cid, "direct", answer=turn["answer"], text=turn["answer"])


def _one_direct(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keep one direct answer per query in the pairs (the first by candidate number: greedy before sampled)."""
    first: dict[str, str] = {}
    for r in sorted(rows, key=lambda r: (r["query_id"], int(r["candidate_id"].rsplit(":r", 1)[1]))):
        if r["kind"] == "direct" and r["in_pairs"]:
            if r["query_id"] in first:
                r.update(in_pairs=False, reason=f"one direct answer per query: {first[r['query_id']]} is in the pairs")
            else:
                first[r["query_id"]] = r["candidate_id"]
    return rows


def sft_candidates(chat: Chat, role: str, queries: pl.DataFrame, cfg: DoubleTurnConfig) -> pl.DataFrame:
    """One row per reply of the SFT model (`role` serves it) to each DPO-stage query, in candidate_responses'
    schema: <query>:r0 greedy, :r1.. sampled; kind clarify or direct as the reply decided; ``in_pairs`` / ``reason``
    say whether it enters the preference pairs (unusable reply, duplicate question, or a second direct answer)."""
    task = subject_task(SFT_SYSTEM, cfg.subject_output)
    sampling = {"seed": cfg.seed, "max_tokens": cfg.subject_max_tokens}
    items = sampling_items(queries, cfg.n_clarify_sampled, sampling | {"temperature": cfg.clarify_temperature},
                           sampling | {"temperature": 0.0})
    answers = ask_all(chat, role, [task.ask(it, {"question": it["question"]}, **it["sampling"]) for it in items])
    rows = [_reply_row(o, cfg.subject_output) for a in answers for o in a.outcomes]
    return candidate_table(queries, _one_direct(rows))
