"""Clarify SFT data (§4, Table 10 prompt): the generator keeps the feasible answers that are right under
different readings (or declines the query when fewer than two are), writes one clarifying question q for x
and one user reply a_i per kept answer y_i, giving (x, q) rows and (x, q, a_i, y_i) rows."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Annotated, Any

import polars as pl
from pydantic import WithJsonSchema, create_model

from dagster_project.io.status import Status
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
    Outcome,
    ask_all,
)

MIN_KEPT = 2  # the Table 10 prompt: "If one or zero of the possible responses are correct, respond with None"


def _question_needed(value: SchemaRequired, _item: Any) -> str | None:
    if value.decline is True:
        return None
    if not isinstance(value.decline, bool):
        return "field 'decline' should be bool"
    q = value.clarifying_question
    return None if isinstance(q, str) and q.strip() else "missing clarifying question (not declined)"


SFT = LLMTask("double_turn_sft", role="generator", check=_question_needed, sampling={"temperature": 0.0})


@cache
def sft_reply(k: int) -> type[SchemaRequired]:
    """The generator's reply for k feasible answers: decline, a clarifying question and reply_1..reply_k.

    A declined reply needs nothing else; otherwise the question is required. A reply_i that is "none",
    missing or not text leaves answer i out of the example (the generator's subset)."""
    text = (Annotated[Any, WithJsonSchema({"type": "string", "maxLength": 120})], None)
    fields: dict[str, Any] = {f"reply_{i}": text for i in range(1, k + 1)}
    return create_model(f"SftReply{k}", __base__=SchemaRequired,
                        decline=(Annotated[Any, WithJsonSchema({"type": "boolean"})], None),
                        clarifying_question=(Annotated[Any, WithJsonSchema({"type": "string", "maxLength": 160})],
                                             None),
                        **fields)


def sft_asks(feasible: pl.DataFrame, max_tokens: int, sources: Sequence[str] = ("human", "model")) -> list[Ask]:
    """One generator request per (query, feasible-answer source) marked for SFT, for the sources asked for
    (double_turn.sft_answer_sets: the Human vs Model ablation of Table 2)."""
    asks = []
    for f in feasible.iter_rows(named=True):
        for source, answers, aliases in (("human", f["y_human"], f["y_human_aliases"]),
                                         ("model", f["y_model"], [[a] for a in f["y_model"]])):
            if source not in sources or not f[f"sft_{source}"]:
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


def _reply_of(o: Outcome[dict[str, Any], Any], i: int) -> str | None:
    """The generator's reply for answer i, None when it left the answer out ("none", missing, not text)."""
    reply = getattr(o.value, f"reply_{i + 1}", None) if o.ok and o.value is not None else None
    reply = reply.strip() if isinstance(reply, str) else None
    return None if reply is None or normalize_answer(reply) in NONE_REPLIES else reply


def _clarify_reason(o: Outcome[dict[str, Any], Any], n_selected: int) -> str | None:
    if not o.ok:
        return o.status.value
    if o.value.decline is True:
        return "generator declined (fewer than two answers fit)"
    return f"generator kept {n_selected} answer(s), fewer than {MIN_KEPT}" if n_selected < MIN_KEPT else None


def sft_rows(o: Outcome[dict[str, Any], Any]) -> list[dict[str, Any]]:
    """1 + k rows for one generator call: (x, q) [row_type clarify] and (x, q, a_i, y_i) [row_type answer].

    The (x, q) row is kept unless the call failed, the generator declined, or it kept fewer than two
    answers. An answer row is kept only when its (x, q) row is and the generator kept that answer with a
    reply that does not leak y_i; ``reason`` says why otherwise."""
    p = o.item
    status = o.status.value
    declined = o.ok and o.value.decline is True
    cq = o.value.clarifying_question if o.ok and not declined else None
    cq = cq.strip() if isinstance(cq, str) and cq.strip() else None
    replies = [_reply_of(o, i) for i in range(len(p["answers"]))] if not declined else [None] * len(p["answers"])
    clarify_reason = _clarify_reason(o, sum(r is not None for r in replies))
    base = {"query_id": p["query_id"], "question": p["question"], "answer_source": p["answer_source"],
            "clarifying_question": cq, **o.provenance()}
    sid = f"{p['query_id']}:{p['answer_source']}"
    rows = [{**base, "sft_id": sid, "row_type": "clarify", "answer_index": None, "expected_answer": None,
             "user_reply": None, "kept": clarify_reason is None, "reason": clarify_reason}]
    for i, (answer, aliases) in enumerate(zip(p["answers"], p["aliases"], strict=True)):
        reply = replies[i]
        if status != Status.OK:
            reason = f"generator reply unusable ({status})"
        elif reply is None:
            reason = "declined" if declined else "no clarifying answer"
        elif leaks_answer(reply, aliases):
            reason = "reply leaks the answer"
        else:
            reason = None if clarify_reason is None else "example dropped"
        rows.append({**base, "sft_id": f"{sid}:{i}", "row_type": "answer", "answer_index": i,
                     "expected_answer": answer, "user_reply": reply, "kept": reason is None, "reason": reason})
    return rows


def clarify_sft(chat: Chat, feasible: pl.DataFrame, max_tokens: int,
                sources: Sequence[str] = ("human", "model")) -> pl.DataFrame:
    """Every generator call of the SFT queries as (x, q) and (x, q, a_i, y_i) rows."""
    asks = sft_asks(feasible, max_tokens, sources)
    rows = [r for a in ask_all(chat, SFT.role, asks) for o in a.outcomes for r in sft_rows(o)]
    return pl.DataFrame(rows, schema=SFT_SCHEMA).select(list(SFT_SCHEMA))
