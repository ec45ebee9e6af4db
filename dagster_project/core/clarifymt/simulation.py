"""ClarifyMT-Bench §4.2: persona user simulator and multi-turn dialogue assembly with reference actions."""

from __future__ import annotations

import polars as pl

from dagster_project.llm.chat import ChatRequest, ChatResult
from dagster_project.llm.parsing import parse_json_object, require_fields
from dagster_project.llm.prompts import load_prompt
from dagster_project.core.shared.taxonomy import Persona, reference_actions

_TEXT = {"type": "string", "minLength": 2, "maxLength": 160}
TWO_TURN_SCHEMA = {"type": "object", "properties": {"reply": _TEXT}, "required": ["reply"]}
THREE_TURN_SCHEMA = {
    "type": "object",
    "properties": {"reply_1": _TEXT, "follow_up_question": _TEXT, "reply_2": _TEXT},
    "required": ["reply_1", "follow_up_question", "reply_2"],
}

MESSAGE_TYPE = pl.List(pl.Struct({"role": pl.Utf8, "content": pl.Utf8}))


def simulation_requests(queries: pl.DataFrame, personas: list[Persona], temperature: float,
                        seed: int = 0) -> tuple[pl.DataFrame, list[ChatRequest]]:
    """One request per (query, persona); returns the plan (query_id, persona) aligned with the requests."""
    two, three = load_prompt("simulate_two_turn"), load_prompt("simulate_three_turn")
    plan, reqs = [], []
    for q in queries.iter_rows(named=True):
        for p in personas:
            prompt, schema = (two, TWO_TURN_SCHEMA) if p.turns == 2 else (three, THREE_TURN_SCHEMA)
            msgs = prompt.messages(query=q["query"], clarifying_question=q["clarifying_question"],
                                   missing_info=", ".join(q["missing_info"] or []) or "unspecified",
                                   persona_name=p.name, behaviour=p.behaviour)
            plan.append({"query_id": q["query_id"], "persona": p.key})
            reqs.append(ChatRequest.of(msgs, prompt.version, schema, temperature=temperature, seed=seed,
                                       max_tokens=200))
    return pl.DataFrame(plan, schema={"query_id": pl.Utf8, "persona": pl.Utf8}), reqs


def _parse_simulation(persona: Persona, res: ChatResult) -> tuple[list[str], str | None, str | None]:
    """(user replies, follow-up question, error)."""
    if res.error:
        return [], None, res.error
    obj, err = parse_json_object(res.text)
    if err:
        return [], None, err
    if persona.turns == 2:
        err = require_fields(obj, {"reply": str})
        return ([obj["reply"].strip()], None, None) if not err else ([], None, err)
    err = require_fields(obj, {"reply_1": str, "follow_up_question": str, "reply_2": str})
    if err:
        return [], None, err
    return [obj["reply_1"].strip(), obj["reply_2"].strip()], obj["follow_up_question"].strip(), None


def assemble_dialogues(queries: pl.DataFrame, plan: pl.DataFrame, requests: list[ChatRequest],
                       results: list[ChatResult], personas: dict[str, Persona]) -> pl.DataFrame:
    """One row per evaluated turn: the dialogue prefix ending in the user's message, and the reference action.

    Turn 1 is the ambiguous query (reference: clarify). Precise/Refusal users settle it in one reply
    (turn 2: answer); the other four need a second clarifying question (turn 2: clarify, turn 3: answer).
    A failed simulation keeps its later turns as rows with status and error, and empty messages.
    """
    by_id = {q["query_id"]: q for q in queries.iter_rows(named=True)}
    rows = []
    for p_row, req, res in zip(plan.iter_rows(named=True), requests, results, strict=True):
        q, persona = by_id[p_row["query_id"]], personas[p_row["persona"]]
        replies, follow_up, err = _parse_simulation(persona, res)
        status = "ok" if err is None else ("llm_error" if res.error else "parse_error")
        assistant_turns = [q["clarifying_question"], follow_up]
        user_turns = [q["query"], *replies]
        history: list[dict[str, str]] = []
        refs = reference_actions(persona)
        for t, ref in enumerate(refs, start=1):
            have = t <= len(user_turns)
            if have:
                if t > 1:
                    history.append({"role": "assistant", "content": assistant_turns[t - 2]})
                history.append({"role": "user", "content": user_turns[t - 1]})
            turn_ok = have and (t == 1 or status == "ok")
            rows.append({
                "dialogue_id": f"{q['query_id']}-{persona.key}", "query_id": q["query_id"],
                "subtype": q["subtype"], "persona": persona.key, "turn": t, "n_turns": persona.turns,
                "messages": list(history) if have else [],
                "user_utterance": user_turns[t - 1] if have else None,
                "reference_action": ref,
                "reference_question": assistant_turns[t - 1] if ref == "clarify" and have else None,
                "status": "ok" if turn_ok else status, "error": None if turn_ok else err,
                "raw_output": None if t == 1 else res.text, "model": res.model,
                "prompt_version": req.prompt_version,
            })
    return pl.DataFrame(rows, schema_overrides={"messages": MESSAGE_TYPE, "user_utterance": pl.Utf8,
                                                "reference_question": pl.Utf8, "error": pl.Utf8,
                                                "raw_output": pl.Utf8})
