"""DPO candidates sampled from the SFT model (§4.1: "response pairs ... sampled from Clarify SFT model").

The SFT model (training/double_turn_sft) learned the Clarify-or-Direct prompt, so it is asked in that prompt and
reply format only. With JSON replies (double_turn.subject_output = json) the candidates are the paper's: one greedy
(T=0) and double_turn.n_clarify_sampled sampled (clarify_temperature) clarifying questions, and one greedy direct
answer (App. B: six questions, one T=0 and five T=1.0, and the single greedy direct answer), the reply schema fixing
each one's action while the model writes its text. Free-text replies cannot be steered that way: there the greedy
and sampled replies are read as the model meant them (phi), and the first direct answer per query enters the pairs.
"""

from __future__ import annotations

from typing import Any, Literal

import polars as pl

from dagster_project.config import DoubleTurnConfig
from dagster_project.core.double_turn.answers import clarify_text
from dagster_project.core.double_turn.candidates import candidate_row, candidate_table, sampling_items
from dagster_project.core.double_turn.evaluation import Decision, parse_turn2, subject_reply_text, subject_task
from dagster_project.llm.task import Ask, Chat, Outcome, Status, ask_all

SFT_SYSTEM = "clarify_or_direct"  # the prompt the double_turn sft_dataset export (and so the SFT model) is in


class ClarifyCandidate(Decision):
    """The Clarify-or-Direct reply with its action fixed to a clarifying question (the schema is the grammar)."""

    action: Literal["clarify"]


class DirectCandidate(Decision):
    """The Clarify-or-Direct reply with its action fixed to a direct answer."""

    action: Literal["answer"]


def _candidate_id(o: Outcome[dict[str, Any], Any]) -> str:
    """<query>:c0 greedy question, :c1.. sampled ones, :d the direct answer (JSON); <query>:r0 greedy, :r1.. sampled
    (free text, kind as decided)."""
    k = o.sample + (0 if o.item["decoding"] == "greedy" else 1)
    forced = o.item.get("forced")
    return f"{o.item['query_id']}:" + ("d" if forced == "answer" else f"c{k}" if forced else f"r{k}")


def _reply_row(o: Outcome[dict[str, Any], Any], output: str) -> dict[str, Any]:
    """A candidate row of one SFT reply: a clarifying question or a direct answer; a failed call or a reply that
    is neither is kind `unusable`, out of the pairs with the reason."""
    cid = _candidate_id(o)
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
    """Keep one direct answer per query in the pairs (the first: greedy before sampled). With JSON replies the
    greedy `:d` request is the only one that can answer, so nothing changes there."""
    first: dict[str, str] = {}
    for r in sorted(rows, key=lambda r: (r["query_id"], r["decoding"] != "greedy", r["sample_index"])):
        if r["kind"] == "direct" and r["in_pairs"]:
            if r["query_id"] in first:
                r.update(in_pairs=False, reason=f"one direct answer per query: {first[r['query_id']]} is in the pairs")
            else:
                first[r["query_id"]] = r["candidate_id"]
    return rows


def _asks(queries: pl.DataFrame, cfg: DoubleTurnConfig) -> list[Ask]:
    """The requests: clarifying questions and one direct answer per query (JSON), or greedy + sampled replies as
    decided (free text)."""
    task = subject_task(SFT_SYSTEM, cfg.subject_output)
    sampling = {"seed": cfg.seed, "max_tokens": cfg.subject_max_tokens}
    items = sampling_items(queries, cfg.n_clarify_sampled, sampling | {"temperature": cfg.clarify_temperature},
                           sampling | {"temperature": 0.0})
    if cfg.subject_output != "json":
        return [task.ask(it, {"question": it["question"]}, **it["sampling"]) for it in items]
    clarify, answer = task.with_reply(ClarifyCandidate), task.with_reply(DirectCandidate)
    asks = [clarify.ask(it | {"forced": "clarify"}, {"question": it["question"]}, **it["sampling"]) for it in items]
    return asks + [answer.ask(it | {"forced": "answer"}, {"question": it["question"]}, **it["sampling"])
                   for it in items if it["decoding"] == "greedy"]


def sft_candidates(chat: Chat, role: str, queries: pl.DataFrame, cfg: DoubleTurnConfig) -> pl.DataFrame:
    """One row per reply of the SFT model (`role` serves it) to each DPO-stage query, in candidate_responses'
    schema; ``in_pairs`` / ``reason`` say whether it enters the preference pairs (unusable reply, duplicate
    question, or, in free text, a second direct answer)."""
    answers = ask_all(chat, role, _asks(queries, cfg))
    rows = [_reply_row(o, cfg.subject_output) for a in answers for o in a.outcomes]
    return candidate_table(queries, _one_direct(rows))
