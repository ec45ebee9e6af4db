"""ClariMM Appendix D: the generator condenses each kept session (multi_turn) and its first turn only
(single_turn) into one inferred search query."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl
from pydantic import Field

from dagster_project.llm.task import Chat, LLMTask, NonEmpty, Reply, ask_all


class InferredQuery(Reply):
    """The query the conversation amounts to (whitespace collapsed when read)."""

    query: NonEmpty = Field(json_schema_extra={"minLength": 3, "maxLength": 100})


INFER = LLMTask("retrieval_infer_query", role="generator", reply=InferredQuery,
                sampling={"temperature": 0.0, "max_tokens": 40})

INPUT_SCHEMA = {"query_id": pl.Utf8, "session_id": pl.Utf8, "input": pl.Utf8, "topic_id": pl.Utf8,
                "facet_id": pl.Utf8, "n_turns": pl.Int64, "initial_request": pl.Utf8, "conversation": pl.Utf8,
                "images": pl.List(pl.Utf8)}


def conversation_text(initial_request: str, turns: Sequence[dict], upto: int | None = None) -> str:
    """The dialogue as plain text: the user's request, then each clarifying question and answer."""
    lines = [f"User: {initial_request}"]
    for t in list(turns)[:upto]:
        lines.append(f"System: {t['question']}")
        lines.append(f"User: {t['answer']}")
    return "\n".join(lines)


def inference_inputs(sessions: pl.DataFrame, inputs: Sequence[str]) -> pl.DataFrame:
    """One row per kept session and input: multi_turn = the whole session, single_turn = its first turn only."""
    rows = []
    for s in sessions.filter(pl.col("kept")).iter_rows(named=True):
        for inp in inputs:
            turns = list(s["turns"])[:1 if inp == "single_turn" else None]
            rows.append({"query_id": f"{s['session_id']}|{inp}", "session_id": s["session_id"], "input": inp,
                         "topic_id": s["topic_id"], "facet_id": s["facet_id"], "n_turns": s["n_turns"],
                         "initial_request": s["initial_request"],
                         "conversation": conversation_text(s["initial_request"], turns),
                         "images": [img for t in turns for img in (t["images"] or [])]})
    return pl.DataFrame(rows, schema=INPUT_SCHEMA)


def infer_queries(chat: Chat, sessions: pl.DataFrame, inputs: Sequence[str], seed: int = 0) -> pl.DataFrame:
    """inference_inputs plus inferred_query and the LLM provenance columns; each distinct conversation asked once."""
    rows = inference_inputs(sessions, inputs)
    conversations = rows["conversation"].to_list()
    asks = [INFER.ask(c, {"conversation": c}, seed=seed) for c in dict.fromkeys(conversations)]
    answers = {a.item: a.first for a in ask_all(chat, INFER.role, asks, once=True)}
    out = [answers[c] for c in conversations]
    return rows.with_columns(
        inferred_query=pl.Series([" ".join(o.value.query.split()) if o.ok else None for o in out], dtype=pl.Utf8),
        **{col: pl.Series([o.provenance()[col] for o in out], dtype=pl.Utf8)
           for col in ("status", "error", "raw_output", "model", "prompt_version")},
    )
