"""Clarify SFT data (§4): the generator writes one clarifying question q for x and one user reply a_i
per feasible answer y_i, giving (x, q) rows and (x, q, a_i, y_i) rows."""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Any

import polars as pl
from pydantic import Field, WithJsonSchema, create_model

from dagster_project.core.double_turn.metrics import normalize_answer
from dagster_project.core.double_turn.simulation import (
    NONE_REPLIES,
    SchemaRequired,
    leaks_answer,
)
from dagster_project.llm.task import (
    PROVENANCE_SCHEMA,
    Ask,
    Chat,
    LLMTask,
    NonEmpty,
    Outcome,
    ask_all,
)

SFT = LLMTask("double_turn_sft", role="generator", sampling={"temperature": 0.0})


@lru_cache(maxsize=None)
def sft_reply(k: int) -> type[SchemaRequired]:
    """The generator's reply for k feasible answers: a clarifying question and reply_1..reply_k.

    Only the question is validated; a missing or non-text reply_i makes that answer row unusable."""
    reply = (Annotated[Any, WithJsonSchema({"type": "string", "maxLength": 120})], None)
    fields: dict[str, Any] = {f"reply_{i}": reply for i in range(1, k + 1)}
    return create_model(f"SftReply{k}", __base__=SchemaRequired,
                        clarifying_question=(NonEmpty, Field(json_schema_extra={"minLength": 5, "maxLength": 160})),
                        **fields)


def sft_asks(feasible: pl.DataFrame, max_tokens: int) -> list[Ask]:
    """One generator request per (query, feasible-answer source) marked for SFT (human and/or model)."""
    asks = []
    for f in feasible.iter_rows(named=True):
        for source, answers, aliases in (("human", f["y_human"], f["y_human_aliases"]),
                                         ("model", f["y_model"], [[a] for a in f["y_model"]])):
            if not f[f"sft_{source}"]:
                continue
            listing = "\n".join(f"{i}. {a}" for i, a in enumerate(answers, start=1))
            fields = ", ".join(f'"reply_{i}"' for i in range(1, len(answers) + 1))
            item = {"query_id": f["query_id"], "question": f["question"], "answer_source": source,
                    "answers": answers, "aliases": aliases}
            values = {"question": f["question"], "answer_list": listing, "reply_fields": fields}
            asks.append(SFT.with_reply(sft_reply(len(answers))).ask(item, values, max_tokens=max_tokens))
    return asks


SFT_SCHEMA = {
    "sft_id": pl.Utf8, "query_id": pl.Utf8, "question": pl.Utf8, "answer_source": pl.Utf8, "row_type": pl.Utf8,
    "answer_index": pl.Int64, "expected_answer": pl.Utf8, "clarifying_question": pl.Utf8,
    "user_reply": pl.Utf8, "kept": pl.Boolean, "reason": pl.Utf8, **PROVENANCE_SCHEMA}


def _answer_reason(status: str, reply: str | None, aliases: list[str]) -> str | None:
    if status != "ok":
        return f"generator reply unusable ({status})"
    if reply is None or normalize_answer(reply) in NONE_REPLIES:
        return "no clarifying answer"
    return "reply leaks the answer" if leaks_answer(reply, aliases) else None


def sft_rows(o: Outcome[dict[str, Any], Any]) -> list[dict[str, Any]]:
    """1 + k rows for one generator call: (x, q) [row_type clarify] and (x, q, a_i, y_i) [row_type answer].

    Answer rows are kept only with a usable reply: not "none", and not leaking y_i (reason otherwise)."""
    p = o.item
    status = o.status.value
    cq = o.value.clarifying_question.strip() if o.ok and o.value else None
    base = {"query_id": p["query_id"], "question": p["question"], "answer_source": p["answer_source"],
            "clarifying_question": cq, **o.provenance()}
    sid = f"{p['query_id']}:{p['answer_source']}"
    rows = [{**base, "sft_id": sid, "row_type": "clarify", "answer_index": None, "expected_answer": None,
             "user_reply": None, "kept": o.ok, "reason": None if o.ok else status}]
    for i, (answer, aliases) in enumerate(zip(p["answers"], p["aliases"], strict=True)):
        reply = getattr(o.value, f"reply_{i + 1}", None) if o.ok else None
        reply = reply.strip() if isinstance(reply, str) else None
        reason = _answer_reason(status, reply, aliases)
        rows.append({**base, "sft_id": f"{sid}:{i}", "row_type": "answer", "answer_index": i,
                     "expected_answer": answer, "user_reply": reply, "kept": reason is None, "reason": reason})
    return rows


def clarify_sft(chat: Chat, feasible: pl.DataFrame, max_tokens: int) -> pl.DataFrame:
    """Every generator call of the SFT queries as (x, q) and (x, q, a_i, y_i) rows."""
    rows = [r for a in ask_all(chat, SFT.role, sft_asks(feasible, max_tokens)) for o in a.outcomes for r in sft_rows(o)]
    return pl.DataFrame(rows, schema=SFT_SCHEMA).select(list(SFT_SCHEMA))
