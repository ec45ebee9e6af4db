"""ClariMM Appendix A refinement of the sampled sessions: prompt A (two QA pairs say the same thing -> drop),
prompt B (the facet is already revealed at turn t -> cut there, the session moves to length t) and
Algorithm 1 (answers rewritten so the intent is concealed on the first turn, hinted in the middle, revealed
on the last). Every sampled session stays a row; kept=False rows say why.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterable, Sequence
from typing import Annotated, Any

import polars as pl
from pydantic import Field, WithJsonSchema

from dagster_project.config import LLMConfig, RetrievalConfig
from dagster_project.llm.task import (
    Chat,
    LLMTask,
    NonEmpty,
    Outcome,
    Reply,
    Status,
    ask_all,
)

# Decisions only (no free-text reason): a few output tokens per check keeps the refinement cheap. The
# conservative choice (keep the session as it is) is listed first in prompt and schema: a judge too weak to
# decide tends to repeat the first option (the embedded 135M model does, measured), and should then leave
# the sessions alone rather than drop or cut every one of them.
SIMILAR_CHOICES = {"different": False, "same": True}
REVEALED_CHOICES = {"not yet": False, "revealed": True}


def _choice(choices: dict[str, bool]) -> Any:
    return Annotated[NonEmpty, WithJsonSchema({"type": "string", "enum": list(choices)})]


class SimilarReply(Reply):
    """Prompt A: do two QA pairs of one session give the same information?"""

    information: _choice(SIMILAR_CHOICES)  # type: ignore[valid-type]

    @property
    def decision(self) -> bool:
        return SIMILAR_CHOICES[self.information.strip().lower()]


class RevealedReply(Reply):
    """Prompt B: does this answer already reveal the facet?"""

    intention: _choice(REVEALED_CHOICES)  # type: ignore[valid-type]

    @property
    def decision(self) -> bool:
        return REVEALED_CHOICES[self.intention.strip().lower()]


class RewriteReply(Reply):
    """Algorithm 1: the answer rewritten for its stage (whitespace collapsed)."""

    answer: NonEmpty = Field(json_schema_extra={"minLength": 2, "maxLength": 150})

    @property
    def decision(self) -> str:
        return " ".join(self.answer.split())


def _in_choices(field: str, choices: dict[str, bool]) -> Any:
    def check(value: Reply, _item: Any) -> str | None:
        said = getattr(value, field)
        return None if said.strip().lower() in choices else f"{field} {said!r} not in {sorted(choices)}"

    return check


JUDGE_SAMPLING = {"temperature": 0.0, "max_tokens": 16}
SIMILAR = LLMTask("retrieval_similar_pairs", role="judge", reply=SimilarReply,
                  check=_in_choices("information", SIMILAR_CHOICES), sampling=JUDGE_SAMPLING)
REVEALED = LLMTask("retrieval_facet_revealed", role="judge", reply=RevealedReply,
                   check=_in_choices("intention", REVEALED_CHOICES), sampling=JUDGE_SAMPLING)
REWRITE = {stage: LLMTask(f"retrieval_rewrite_{stage}", role="user_simulator", reply=RewriteReply,
                          sampling={"max_tokens": 64})
           for stage in ("conceal", "hint", "reveal")}


def worst(statuses: Iterable[Status]) -> Status:
    """The most severe status among the LLM calls a row depends on (ok when it depends on none)."""
    order = list(Status)  # ok < parse_error < llm_error < input_error
    return max(statuses, key=order.index, default=Status.OK)


def decision(outcome: Outcome | None) -> Any:
    """The parsed decision of a check (None when it was not run or failed)."""
    return outcome.value.decision if outcome is not None and outcome.ok else None


def session_pairs(qa_ids: Sequence[str]) -> list[tuple[str, str]]:
    """Every unordered pair of turns of a session (prompt A compares two QA pairs at a time)."""
    return list(itertools.combinations(qa_ids, 2))


def first_revealed_turn(flags: Sequence[bool | None]) -> int | None:
    """1-based turn whose answer already reveals the facet (None/unknown counts as not revealed)."""
    return next((t for t, f in enumerate(flags, start=1) if f is True), None)


def cut_at_reveal(qa_ids: Sequence[str], flags: Sequence[bool | None]) -> tuple[list[str], str | None]:
    """Appendix A prompt B: keep the turns up to the one that reveals the facet.

    Revealed on the last turn (or never): unchanged. Revealed on turn t in 2..n-1: the first t turns (the
    session moves to the t-turn set). Revealed on turn 1: no multi-turn session is left -> reason.
    """
    t = first_revealed_turn(flags)
    if t is None or t >= len(qa_ids):
        return list(qa_ids), None
    if t == 1:
        return list(qa_ids[:1]), "facet revealed at turn 1"
    return list(qa_ids[:t]), None


def rewrite_stage(turn: int, n_turns: int) -> str:
    """Algorithm 1: conceal the intent on the first turn, reveal it fully on the last, hint in between."""
    if turn == n_turns:
        return "reveal"
    return "conceal" if turn == 1 else "hint"


TURN_TYPE = pl.Struct({"turn": pl.Int64, "qa_id": pl.Utf8, "question_id": pl.Utf8, "question": pl.Utf8,
                       "answer_raw": pl.Utf8, "answer": pl.Utf8, "images": pl.List(pl.Utf8),
                       "rewrite_stage": pl.Utf8, "rewrite_status": pl.Utf8})
LOG_TYPE = pl.Struct({"step": pl.Utf8, "key": pl.Utf8, "decision": pl.Utf8, "status": pl.Utf8, "error": pl.Utf8,
                      "raw_output": pl.Utf8})
SESSION_SCHEMA = {
    "session_id": pl.Utf8, "topic_id": pl.Utf8, "facet_id": pl.Utf8, "facet_desc": pl.Utf8,
    "initial_request": pl.Utf8, "sampled_length": pl.Int64, "n_turns": pl.Int64, "cut_from": pl.Int64,
    "stream_index": pl.Int64, "combinations_available": pl.Int64, "target_per_length": pl.Int64,
    "turns": pl.List(TURN_TYPE), "has_images": pl.Boolean, "kept": pl.Boolean, "reject_reason": pl.Utf8,
    "status": pl.Utf8, "error": pl.Utf8, "refinement": pl.List(LOG_TYPE),
}


def _show(value: Any) -> str | None:
    return None if value is None else ("yes" if value is True else "no" if value is False else str(value))


def _entry(step: str, key: str, o: Outcome) -> dict[str, Any]:
    return {"step": step, "key": key, "decision": _show(decision(o)), "status": o.status.value, "error": o.error,
            "raw_output": o.raw_output}


def refine_sessions(candidates: pl.DataFrame, qa: dict[str, dict], similar: dict[tuple[str, str], Outcome],
                    revealed: dict[str, Outcome], rewrites: dict[tuple[str, str], Outcome]) -> pl.DataFrame:
    """Apply prompt A, prompt B and Algorithm 1 outcomes to the sampled sessions; every session stays a row.

    kept=False rows carry reject_reason: 'similar QA pairs a ~ b', 'facet revealed at turn 1',
    'judge verdict unusable (<status>): <step> <key>' or 'duplicate of <session_id> after cut'. A missing
    outcome (check switched off) counts as 'not similar' / 'not revealed' / 'answer unchanged'. A judge verdict
    that failed or could not be parsed drops the session (status parse_error / llm_error, bounded by the
    sessions check) instead of passing it unchecked; a failed rewrite keeps the raw answer and says so.
    status is the worst status of the calls the session depended on.
    """
    rows = []
    kept_keys: dict[tuple[str, tuple[str, ...]], str] = {}
    # shorter sampled lengths first: a session cut down to length t is the duplicate, not the one sampled at t
    for c in candidates.sort("sampled_length", "stream_index").iter_rows(named=True):
        ids = list(c["qa_ids"])
        log, reason = [], None
        for a, b in session_pairs(ids):
            if (o := similar.get((a, b))) is not None:
                log.append(_entry("similar_pair", f"{a} ~ {b}", o))
                if decision(o) is True and reason is None:
                    reason = f"similar QA pairs {a} ~ {b}"
        flags = [decision(revealed.get(i)) for i in ids]
        log += [_entry("facet_revealed", i, revealed[i]) for i in ids if i in revealed]
        unusable = next((e for e in log if e["status"] != Status.OK.value), None)
        if reason is None and unusable is not None:  # a check that gave no verdict never passes a session
            reason = f"judge verdict unusable ({unusable['status']}): {unusable['step']} {unusable['key']}"
        cut_from = None
        if reason is None:
            new_ids, reason = cut_at_reveal(ids, flags)
            if reason is None and len(new_ids) < len(ids):
                cut_from, ids = len(ids), new_ids
        if reason is None:
            key = (c["facet_id"], tuple(ids))
            if key in kept_keys:
                reason = f"duplicate of {kept_keys[key]} after cut"
            else:
                kept_keys[key] = c["session_id"]
        turns = []
        for t, i in enumerate(ids, start=1):
            stage = rewrite_stage(t, len(ids))
            o = rewrites.get((i, stage)) if reason is None else None
            if o is not None:
                log.append(_entry(f"rewrite_{stage}", i, o))
            row = qa[i]
            turns.append({"turn": t, "qa_id": i, "question_id": row["question_id"], "question": row["question"],
                          "answer_raw": row["answer"], "answer": decision(o) or row["answer"],
                          "images": list(row["images"] or []),
                          "rewrite_stage": stage if o is not None else None,
                          "rewrite_status": o.status.value if o is not None else None})
        errors = [f"{e['step']} {e['key']}: {e['error']}" for e in log if e["error"]]
        first = qa[ids[0]]
        rows.append({
            "session_id": c["session_id"], "topic_id": first["topic_id"], "facet_id": c["facet_id"],
            "facet_desc": first["facet_desc"], "initial_request": first["initial_request"],
            "sampled_length": c["sampled_length"], "n_turns": len(ids), "cut_from": cut_from,
            "stream_index": c["stream_index"], "combinations_available": c["combinations_available"],
            "target_per_length": c["target_per_length"], "turns": turns,
            "has_images": any(t["images"] for t in turns), "kept": reason is None, "reject_reason": reason,
            "status": worst(Status(e["status"]) for e in log).value, "error": "; ".join(errors)[:2000] or None,
            "refinement": log,
        })
    return pl.DataFrame(rows, schema=SESSION_SCHEMA).sort("sampled_length", "stream_index")


def _ask_each(chat: Chat, task: LLMTask, items: Iterable[Hashable], values: Any, **sampling: Any) -> dict:
    """item -> outcome of `task` for every distinct item (each distinct prompt sent once)."""
    asks = [task.ask(item, values(item), **sampling) for item in dict.fromkeys(items)]
    return {a.item: a.first for a in ask_all(chat, task.role, asks, once=True)}


def refine(chat: Chat, candidates: pl.DataFrame, qa: dict[str, dict], cfg: RetrievalConfig,
           llm_config: LLMConfig) -> pl.DataFrame:
    """Run the enabled checks (prompt A, prompt B, then Algorithm 1 on the turns that survive) and refine.

    Rows get `model` (the roles' models) and `prompt_version` (the templates used), comma-joined."""
    judge_seed, simulator_seed = llm_config.role(SIMILAR.role).seed, llm_config.role("user_simulator").seed
    similar: dict = {}
    if cfg.similar_check:
        pairs = (pr for ids in candidates["qa_ids"] for pr in session_pairs(list(ids)))
        similar = _ask_each(chat, SIMILAR, pairs, lambda p: {
            "question1": qa[p[0]]["question"], "answer1": qa[p[0]]["answer"],
            "question2": qa[p[1]]["question"], "answer2": qa[p[1]]["answer"]}, seed=judge_seed)
    revealed: dict = {}
    if cfg.reveal_cut:
        ids = (i for row in candidates["qa_ids"] for i in row)
        revealed = _ask_each(chat, REVEALED, ids, lambda i: _turn_values(qa[i]), seed=judge_seed)
    rewrites: dict = {}
    if cfg.rewrite_answers:
        planned = refine_sessions(candidates, qa, similar, revealed, {})  # which turns survive, at which stage
        items = dict.fromkeys((t["qa_id"], rewrite_stage(t["turn"], row["n_turns"]))
                              for row in planned.filter(pl.col("kept")).iter_rows(named=True) for t in row["turns"])
        asks = [REWRITE[item[1]].ask(item, _turn_values(qa[item[0]]), temperature=cfg.refine_temperature,
                                     seed=simulator_seed) for item in items]
        rewrites = {a.item: a.first for a in ask_all(chat, "user_simulator", asks, once=True)}
    used = [(SIMILAR, cfg.similar_check), (REVEALED, cfg.reveal_cut),
            *((task, cfg.rewrite_answers) for task in REWRITE.values())]
    versions = sorted({task.version for task, on in used if on})
    models = sorted({llm_config.role(task.role).model for task, on in used if on})
    return refine_sessions(candidates, qa, similar, revealed, rewrites).with_columns(
        model=pl.lit(", ".join(models) or None, pl.Utf8), prompt_version=pl.lit(", ".join(versions) or None, pl.Utf8))


def _turn_values(row: dict) -> dict[str, Any]:
    return {"facet": row["facet_desc"], "question": row["question"], "answer": row["answer"]}


def length_summary(sessions: pl.DataFrame, lengths: Sequence[int]) -> pl.DataFrame:
    """Per length: combinations available, sampled, kept at that final length, target and shortfall."""
    rows = []
    for n in lengths:
        sampled = sessions.filter(pl.col("sampled_length") == n)
        kept = sessions.filter(pl.col("kept") & (pl.col("n_turns") == n))
        target = int(sampled["target_per_length"].max() or 0) if sampled.height else 0
        rows.append({
            "n_turns": n,
            "combinations_available": int(sampled["combinations_available"].max() or 0) if sampled.height else 0,
            "sampled": sampled.height,
            "cut_to_shorter": sampled.filter(pl.col("cut_from").is_not_null()).height,
            "dropped": sampled.filter(~pl.col("kept")).height,
            "moved_in": kept.filter(pl.col("cut_from").is_not_null()).height,
            "kept": kept.height, "target": target, "shortfall": max(target - kept.height, 0),
        })
    return pl.DataFrame(rows)
