"""User simulation psi(x, q, y_i) -> a_i: the user who expects y_i replies to a clarifying question.

A reply that contains y_i (any alias, as whole words) leaks it and counts as an abstain for the training labels;
so does a "none"-like reply. The reply is kept for inspection. The evaluation answers such users anyway and scores
leaks by the paper's released rule (metrics.paper_leak).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Annotated, Any

import polars as pl
from pydantic import ConfigDict, WithJsonSchema

from dagster_project.core.double_turn.metrics import normalize_answer
from dagster_project.llm.task import PROVENANCE_SCHEMA, Chat, LLMTask, Outcome, Reply

NONE_REPLIES = {"", "none", "n/a", "na", "no reply", "no answer"}


def _all_required(schema: dict[str, Any]) -> None:
    schema["required"] = list(schema.get("properties", {}))


class SchemaRequired(Reply):
    """A reply whose schema requires every field although validation tolerates some missing ones
    (the grammar asks for them; an API reply without them is still read as before)."""

    model_config = ConfigDict(json_schema_extra=_all_required)


class SimulatedReply(SchemaRequired):
    """The simulated user's turn: a reply, or an explicit abstain (then no reply is needed)."""

    reply: Annotated[Any, WithJsonSchema({"type": "string", "maxLength": 150})] = None
    abstain: Annotated[Any, WithJsonSchema({"type": "boolean"})] = None


def _reply_problem(value: SimulatedReply, _item: Any) -> str | None:
    if value.abstain is True:  # an explicit abstain needs no reply
        return None
    if "reply" not in value.model_fields_set:
        return "missing field 'reply'"
    if not isinstance(value.reply, str):
        return f"field 'reply' should be str, got {type(value.reply).__name__}"
    return None if value.reply.strip() else "field 'reply' is empty"


# The paper labels preferences with one simulator (a trained model) and evaluates with another (GPT-4), so a
# policy cannot overfit its judge: two roles, one prompt.
SIMULATE = LLMTask("double_turn_user", role="label_simulator", reply=SimulatedReply, check=_reply_problem,
                   sampling={"temperature": 0.0, "max_tokens": 80})
EVAL_SIMULATE = dataclasses.replace(SIMULATE, role="eval_simulator")


def simulation_values(item: dict[str, Any]) -> dict[str, str]:
    """Template values of a simulation item {question, clarifying_question, expected_answer}."""
    return {"question": item["question"], "clarifying_question": item["clarifying_question"],
            "expected_answer": item["expected_answer"]}


def simulate(chat: Chat, items: list[dict[str, Any]],
             task: LLMTask[SimulatedReply] = SIMULATE) -> list[Outcome[dict[str, Any], SimulatedReply]]:
    """One simulator call per item (label_simulator unless ``task`` says otherwise), one outcome per item."""
    return task.run(chat, items, simulation_values)


def _spaced(text: str | None) -> str:
    """normalize_answer after turning punctuation into spaces ("Cameron's" -> "cameron s", "1990-91" -> "1990 91")."""
    return normalize_answer(re.sub(r"[^\w\s]", " ", text or ""))


def leaks_answer(reply: str | None, aliases: list[str]) -> bool:
    """True when an alias of the user's answer appears, as whole words, in the reply.

    Both sides are compared under SQuAD normalisation and under a variant where punctuation separates
    words, so "James Cameron's film" and "the Nile-based one" leak "James Cameron" / "Nile" while
    "1950" does not leak "5".
    """
    texts = (f" {normalize_answer(reply)} ", f" {_spaced(reply)} ")
    keys = {k for a in aliases for k in (normalize_answer(a), _spaced(a)) if k}
    return any(f" {k} " in t for k in keys for t in texts)


def simulation_fields(o: Outcome[dict[str, Any], SimulatedReply]) -> dict[str, Any]:
    """reply, abstained, abstain_reason (simulator_abstained / no_reply / leak / parse_error / llm_error)
    and the provenance columns; the item's ``aliases`` decide what leaks."""
    if not o.ok or o.value is None:  # the status names the reason
        return {"reply": None, "abstained": True, "abstain_reason": o.status.value, **o.provenance()}
    v = o.value
    if v.abstain is True:
        reply = v.reply if isinstance(v.reply, str) else ""
        return {"reply": reply.strip() or None, "abstained": True, "abstain_reason": "simulator_abstained",
                **o.provenance()}
    reply = v.reply.strip()
    if normalize_answer(reply) in NONE_REPLIES:
        reason = "no_reply"
    elif leaks_answer(reply, o.item["aliases"]):
        reason = "leak"
    else:
        reason = None
    return {"reply": reply, "abstained": reason is not None, "abstain_reason": reason, **o.provenance()}


def user_items(candidates: pl.DataFrame, qa: pl.DataFrame) -> list[dict[str, Any]]:
    """Every (clarifying candidate in the pairs, user i) with the user's expected answer and aliases."""
    qinfo = {q["query_id"]: q for q in qa.iter_rows(named=True)}
    items = []
    for c in candidates.filter((pl.col("kind") == "clarify") & pl.col("in_pairs")).iter_rows(named=True):
        q = qinfo[c["query_id"]]
        for i, (gold, aliases) in enumerate(zip(q["gold_answers"], q["answers"], strict=True)):
            items.append({"sim_id": f"{c['candidate_id']}:u{i}", "candidate_id": c["candidate_id"],
                          "query_id": c["query_id"], "user_index": i, "question": q["question"],
                          "clarifying_question": c["clarifying_question"], "expected_answer": gold,
                          "aliases": aliases})
    return items


SIMULATION_SCHEMA = {
    "sim_id": pl.Utf8, "candidate_id": pl.Utf8, "query_id": pl.Utf8, "user_index": pl.Int64,
    "expected_answer": pl.Utf8, "clarifying_question": pl.Utf8, "reply": pl.Utf8, "abstained": pl.Boolean,
    "abstain_reason": pl.Utf8, **PROVENANCE_SCHEMA,
}


def user_simulations(chat: Chat, candidates: pl.DataFrame, qa: pl.DataFrame) -> pl.DataFrame:
    """psi(x, q, y_i) -> a_i for every clarifying candidate in the pairs and every user of its query."""
    keys = ("sim_id", "candidate_id", "query_id", "user_index", "expected_answer", "clarifying_question")
    rows = [{k: o.item[k] for k in keys} | simulation_fields(o) for o in simulate(chat, user_items(candidates, qa))]
    return pl.DataFrame(rows, schema=SIMULATION_SCHEMA).select(list(SIMULATION_SCHEMA))
