"""§2.1.2 conversation simulation: the assistant predicts an intent, says out of domain, or asks; the user simulator
answers from the unambiguous query it has in mind. Every turn is one batched call for all open conversations."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import polars as pl
from pydantic import Field

from dagster_project.config import IntentsConfig
from dagster_project.core.intents.assistant import (
    assistant_request,
    assistant_task,
    parse_assistant_reply,
    render_reply,
)
from dagster_project.core.intents.catalog import OOD_TARGET, Catalog
from dagster_project.core.intents.utterances import round_robin_sample
from dagster_project.llm.chat import Message
from dagster_project.llm.task import Chat, LLMTask, NonEmpty, Outcome, Reply, Status

# Conversation outcomes. The first four are the assistant's doing and are scored; the last two are not.
OUTCOMES = ("correct", "wrong_intent", "max_turns", "invalid_reply", Status.LLM_ERROR.value, "user_error")
SCORED_OUTCOMES = ("correct", "wrong_intent", "max_turns", "invalid_reply")
PREDICTION_OUTCOMES = ("correct", "wrong_intent")  # the conversation ended with an intent or "out of domain"
USER_ROLE = "user_simulator"


@dataclass(frozen=True)
class ConversationSeed:
    conversation_id: str
    kind: str  # ambiguous | unambiguous | ood | ood_dropout
    query_id: str
    first_message: str
    unambiguous_query: str
    true_intent: str  # an intent name, or OOD_TARGET
    candidates: tuple[str, ...]
    split: str
    method: str | None = None
    max_turns: int = 5


class UserReply(Reply):
    """The user simulator's next message."""

    reply: NonEmpty = Field(json_schema_extra={"minLength": 2, "maxLength": 120})


USER = LLMTask("intents_user", role=USER_ROLE, reply=UserReply, lenient=True, sampling={"max_tokens": 80})

TURN_SCHEMA = {
    "conversation_id": pl.Utf8, "message_index": pl.Int64, "speaker": pl.Utf8, "text": pl.Utf8, "action": pl.Utf8,
    "predicted_intent": pl.Utf8, "assistant_turn": pl.Int64, "status": pl.Utf8, "error": pl.Utf8,
    "raw_output": pl.Utf8, "model": pl.Utf8, "prompt_version": pl.Utf8, "repaired": pl.Boolean,
}
CONVERSATION_SCHEMA = {
    "kind": pl.Utf8, "query_id": pl.Utf8, "split": pl.Utf8, "method": pl.Utf8, "true_intent": pl.Utf8,
    "ambiguous_query": pl.Utf8, "unambiguous_query": pl.Utf8, "candidate_intents": pl.List(pl.Utf8),
    "max_turns": pl.Int32, "outcome": pl.Utf8, "final_prediction": pl.Utf8, "n_assistant_turns": pl.Int32,
    "llm_calls": pl.Int32,
}


def transcript(history: list[Message], label_turns: bool = True) -> str:
    """`[user 1] ...` / `[assistant 1] ...` lines (numbered per speaker)."""
    counts: dict[str, int] = defaultdict(int)
    lines = []
    for m in history:
        counts[m["role"]] += 1
        who = f"[{m['role']} {counts[m['role']]}]" if label_turns else f"{m['role']}:"
        lines.append(f"{who} {m['content']}")
    return "\n".join(lines)


def _user_values(seed: ConversationSeed, rows: list[dict[str, Any]]) -> dict[str, str]:
    """Fig. 5 in our words; the simulator sees the assistant's plain text (its question), not the JSON envelope."""
    seen = [{"role": r["speaker"], "content": r["text"]} for r in rows if r["text"] is not None]
    return {"ambiguous_query": seed.first_message, "unambiguous_query": seed.unambiguous_query,
            "transcript": transcript(seen, label_turns=False)}


def _assistant_row(x: ConversationSeed, o: Outcome, index: int, turn: int) -> dict[str, Any]:
    row = {"conversation_id": x.conversation_id, "message_index": index, "speaker": "assistant", "text": None,
           "action": "invalid", "predicted_intent": None, "assistant_turn": turn, **o.provenance(repaired=True)}
    if o.status is not Status.LLM_ERROR:
        reply = parse_assistant_reply(o.raw_output, list(x.candidates))
        row.update(text=reply.text, action=reply.action, repaired=reply.repaired,
                   predicted_intent=reply.intent if reply.action == "intent" else
                   (OOD_TARGET if reply.action == "out_of_domain" else None))
    return row


def _outcome(x: ConversationSeed, row: dict[str, Any], turn: int) -> str | None:
    """How the conversation ends with this assistant row, or None when it goes on (a question within the limit)."""
    if row["status"] != Status.OK:
        return Status.LLM_ERROR.value if row["status"] == Status.LLM_ERROR else "invalid_reply"
    if row["action"] in ("intent", "out_of_domain"):
        return "correct" if row["predicted_intent"] == x.true_intent else "wrong_intent"
    return "max_turns" if turn >= x.max_turns else None


def simulate_conversations(seeds: list[ConversationSeed], chat: Chat, catalog: Catalog, demos: list[list[Message]],
                           cfg: IntentsConfig, assistant_role: str = "assistant", user_seed: int = 0) -> pl.DataFrame:
    """Run every conversation turn by turn; each turn is ONE batched call for all conversations still open.

    A question is answered by the user simulator unless the conversation used its max_turns. One row per message
    (the opening user message included) with the conversation's seed fields and its outcome: correct / wrong_intent
    (a prediction), max_turns (still asking at the limit), invalid_reply (unusable assistant reply), llm_error,
    user_error (the simulator failed).
    """
    task = assistant_task(cfg.structured_output)
    history = {x.conversation_id: [{"role": "user", "content": x.first_message}] for x in seeds}
    rows: dict[str, list[dict]] = {x.conversation_id: [{
        "conversation_id": x.conversation_id, "message_index": 0, "speaker": "user", "text": x.first_message,
        "action": "opening", "status": Status.OK.value}] for x in seeds}
    outcome: dict[str, str] = {}
    final: dict[str, str | None] = {}
    calls: dict[str, int] = defaultdict(int)
    active, turn = list(seeds), 1
    while active:
        sent = [(x, assistant_request(catalog, list(x.candidates), demos, history[x.conversation_id],
                                      cfg.structured_output, cfg.examples_per_intent, cfg.assistant_max_tokens))
                for x in active]
        asking = []
        for (x, req), res in zip(sent, chat(assistant_role, [r for _, r in sent]), strict=True):
            cid = x.conversation_id
            calls[cid] += 1
            row = _assistant_row(x, task.outcomes(x, req, res)[0], len(rows[cid]), turn)
            rows[cid].append(row)
            end = _outcome(x, row, turn)
            if end:
                outcome[cid] = end
                final[cid] = row["predicted_intent"]
            else:
                reply = parse_assistant_reply(row["raw_output"], list(x.candidates))
                history[cid].append({"role": "assistant", "content": render_reply(reply, cfg.structured_output)})
                asking.append(x)
        if not asking:
            break
        answers = USER.run(chat, asking, lambda x: _user_values(x, rows[x.conversation_id]),
                           lambda x: {"temperature": cfg.user_temperature, "seed": user_seed + turn})
        active = []
        for o in answers:
            cid = o.item.conversation_id
            calls[cid] += 1
            text = " ".join(o.value.reply.split()) if o.ok else None
            rows[cid].append({"conversation_id": cid, "message_index": len(rows[cid]), "speaker": "user",
                              "text": text, "action": "reply", **o.provenance(repaired=True)})
            if not o.ok:
                outcome[cid] = "user_error"
                continue
            history[cid].append({"role": "user", "content": text})
            active.append(o.item)
        turn += 1
    frames = [_conversation_frame(x, rows[x.conversation_id], outcome[x.conversation_id],
                                  final.get(x.conversation_id), calls[x.conversation_id]) for x in seeds]
    return pl.concat(frames, how="vertical_relaxed") if frames else empty_turns()


def _conversation_frame(x: ConversationSeed, rows: list[dict], outcome: str, final: str | None,
                        calls: int) -> pl.DataFrame:
    t = pl.DataFrame(rows, schema=TURN_SCHEMA)
    return t.with_columns(
        kind=pl.lit(x.kind), query_id=pl.lit(x.query_id), split=pl.lit(x.split), method=pl.lit(x.method, pl.Utf8),
        true_intent=pl.lit(x.true_intent), ambiguous_query=pl.lit(x.first_message),
        unambiguous_query=pl.lit(x.unambiguous_query), candidate_intents=pl.lit(list(x.candidates), pl.List(pl.Utf8)),
        max_turns=pl.lit(x.max_turns), outcome=pl.lit(outcome), final_prediction=pl.lit(final, pl.Utf8),
        n_assistant_turns=pl.lit(int((t["speaker"] == "assistant").sum())), llm_calls=pl.lit(calls))


def empty_turns() -> pl.DataFrame:
    """The turn table with no rows."""
    return pl.DataFrame(schema={**TURN_SCHEMA, **CONVERSATION_SCHEMA})


# --------------------------------------------------------------------------- seeds for training and test conversations

def ambiguous_seeds(queries: pl.DataFrame, candidates: list[str], max_turns: int,
                    prefix: str) -> list[ConversationSeed]:
    """Ambiguous queries as conversations: the ambiguous query opens, the unambiguous one is what the user means."""
    return [ConversationSeed(f"{prefix}amb-{r['query_id']}", "ambiguous", r["query_id"], r["ambiguous_query"],
                             r["unambiguous_query"], r["true_intent"], tuple(candidates), r["split"], r["method"],
                             max_turns) for r in queries.iter_rows(named=True)]


def unambiguous_seeds(utts: pl.DataFrame, candidates: list[str], max_turns: int, prefix: str,
                      kind: str = "unambiguous") -> list[ConversationSeed]:
    """Tagged utterances as conversations. kind "ood": a user-provided OOD utterance, target out of domain;
    kind "ood_dropout": label dropout, the true intent removed from the candidates and the target out of domain."""
    out = []
    for r in utts.iter_rows(named=True):
        cands, target = list(candidates), r["intent"]
        if kind == "ood":
            target = OOD_TARGET
        elif kind == "ood_dropout":
            cands, target = [c for c in candidates if c != r["intent"]], OOD_TARGET
        tag = {"unambiguous": "una", "ood": "ood", "ood_dropout": "drop"}[kind]
        out.append(ConversationSeed(f"{prefix}{tag}-{r['utterance_id']}", kind, r["utterance_id"], r["text"],
                                    r["text"], target, tuple(cands), r["split"], None, max_turns))
    return out


def training_seeds(catalog: Catalog, utterances: pl.DataFrame, ambiguous: pl.DataFrame,
                   cfg: IntentsConfig) -> list[ConversationSeed]:
    """Training-split conversations: kept ambiguous train queries (up to max_turns) and n_unambiguous_train tagged
    utterances as single-turn conversations (Appendix C: query, then the predicted intent)."""
    amb = ambiguous.filter(pl.col("kept") & (pl.col("split") == "train"))
    una = round_robin_sample(utterances.filter(~pl.col("is_ood") & (pl.col("split") == "train")),
                             cfg.n_unambiguous_train, cfg.seed + 2)
    return (ambiguous_seeds(amb, catalog.names, cfg.max_turns, "train/")
            + unambiguous_seeds(una, catalog.names, 1, "train/"))
