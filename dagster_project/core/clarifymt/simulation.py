"""ClarifyMT-Bench §4.2: persona user simulator and multi-turn dialogue assembly with reference actions."""

from __future__ import annotations

from typing import Any

import polars as pl
from pydantic import Field

from dagster_project.core.shared.taxonomy import Persona, reference_actions
from dagster_project.llm.task import Chat, LLMTask, NonEmpty, Outcome, Reply, Status

MESSAGE_TYPE = pl.List(pl.Struct({"role": pl.Utf8, "content": pl.Utf8}))


def _utterance() -> Any:
    return Field(json_schema_extra={"minLength": 2, "maxLength": 160})


class TwoTurnReply(Reply):
    """Precise / Refusal users: one reply that settles the request."""

    reply: NonEmpty = _utterance()


class ThreeTurnReply(Reply):
    """The other personas: a first reply in character, the assistant's follow-up, then the settling reply."""

    reply_1: NonEmpty = _utterance()
    follow_up_question: NonEmpty = _utterance()
    reply_2: NonEmpty = _utterance()


_SAMPLING = {"max_tokens": 200}
SIMULATE = {
    2: LLMTask("simulate_two_turn", role="user_simulator", reply=TwoTurnReply, sampling=_SAMPLING),
    3: LLMTask("simulate_three_turn", role="user_simulator", reply=ThreeTurnReply, sampling=_SAMPLING),
}
"""The simulator step per number of turns a persona's dialogue has."""


def _values(item: tuple[dict[str, Any], Persona]) -> dict[str, Any]:
    q, p = item
    return {"query": q["query"], "clarifying_question": q["clarifying_question"],
            "missing_info": ", ".join(q["missing_info"] or []) or "unspecified",
            "persona_name": p.name, "behaviour": p.behaviour}


def simulate(chat: Chat, queries: pl.DataFrame, personas: list[Persona], temperature: float,
             seed: int = 0) -> pl.DataFrame:
    """Each query x persona simulated once (one batch per dialogue length), assembled in query x persona order."""
    pairs = [(q, p) for q in queries.iter_rows(named=True) for p in personas]
    done: dict[tuple[str, str], Outcome] = {}
    for turns, task in SIMULATE.items():
        items = [(q, p) for q, p in pairs if p.turns == turns]
        for o in task.run(chat, items, _values, lambda _: {"temperature": temperature, "seed": seed}):
            done[(o.item[0]["query_id"], o.item[1].key)] = o
    rows = [row for q, p in pairs for row in dialogue_rows(q, p, done[(q["query_id"], p.key)])]
    return pl.DataFrame(rows, schema_overrides={"messages": MESSAGE_TYPE, "user_utterance": pl.Utf8,
                                                "reference_question": pl.Utf8, "error": pl.Utf8,
                                                "raw_output": pl.Utf8})


def dialogue_rows(q: dict[str, Any], persona: Persona, sim: Outcome) -> list[dict[str, Any]]:
    """One row per evaluated turn: the dialogue prefix ending in the user's message, and the reference action.

    Turn 1 is the ambiguous query (reference: clarify). Precise/Refusal users settle it in one reply
    (turn 2: answer); the four noisy personas stay noisy in both replies (turns 2 and 3: clarify).
    A failed simulation keeps its later turns as rows with status and error, and empty messages.
    """
    v = sim.value
    replies = [] if not sim.ok else [v.reply.strip()] if persona.turns == 2 else [v.reply_1.strip(), v.reply_2.strip()]
    follow_up = v.follow_up_question.strip() if sim.ok and persona.turns == 3 else None
    assistant_turns = [q["clarifying_question"], follow_up]
    user_turns = [q["query"], *replies]
    history: list[dict[str, str]] = []
    rows = []
    for t, ref in enumerate(reference_actions(persona), start=1):
        have = t <= len(user_turns)
        if have:
            if t > 1:
                history.append({"role": "assistant", "content": assistant_turns[t - 2]})
            history.append({"role": "user", "content": user_turns[t - 1]})
        turn_ok = have and (t == 1 or sim.ok)
        rows.append({
            "dialogue_id": f"{q['query_id']}-{persona.key}", "query_id": q["query_id"],
            "subtype": q["subtype"], "persona": persona.key, "turn": t, "n_turns": persona.turns,
            "messages": list(history) if have else [],
            "user_utterance": user_turns[t - 1] if have else None,
            "reference_action": ref,
            # no question follows the noisy user's last reply in the simulation: turn 3 has no reference question
            "reference_question": assistant_turns[t - 1] if ref == "clarify" and have and t <= len(assistant_turns)
            else None,
            "status": (Status.OK if turn_ok else sim.status).value, "error": None if turn_ok else sim.error,
            "raw_output": None if t == 1 else (sim.raw_output or ""), "model": sim.model,
            "prompt_version": sim.prompt_version,
        })
    return rows
