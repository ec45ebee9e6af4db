"""Answers: the answerer's few-shot direct answers (Y_model, §4 SFT data) and the answer after
clarification y_hat_i = M(x, q, a_i), with the answer-text helpers every step shares."""

from __future__ import annotations

import dataclasses
import json
import random
import re
from collections import Counter
from typing import Any

import polars as pl
from pydantic import Field

from dagster_project.config import DoubleTurnConfig
from dagster_project.core.double_turn.metrics import exact_match, normalize_answer
from dagster_project.llm.task import (
    PROVENANCE_SCHEMA,
    Chat,
    LLMTask,
    NonEmpty,
    Outcome,
    Parsed,
    Reply,
    Status,
)

CLARIFY_MARK = "Clarifying Question:"
_ANSWER_LEAD = re.compile(r"^\s*(?:the\s+answer\s+is|answer)\s*[:\-]?\s*", re.I)


class Answer(Reply):
    """A short answer (the answerer's reply, direct or after clarification)."""

    answer: NonEmpty = Field(json_schema_extra={"minLength": 1, "maxLength": 60})


def clean_answer(text: str) -> str:
    """The answer without a leading "The answer is" / "Answer:"."""
    return _ANSWER_LEAD.sub("", text.strip()).strip()


def _usable(value: Answer, _item: Any) -> str | None:
    return None if clean_answer(value.answer) else "empty answer"


ANSWER = LLMTask("double_turn_answer", role="answerer", reply=Answer, check=_usable)


def completion_answer(text: str | None) -> str | None:
    """The answer a few-shot completion wrote: its first line, without an "Answer:" lead; None if empty."""
    line = next((ln for ln in (text or "").strip().splitlines() if ln.strip()), "")
    return clean_answer(line.split("Question:", 1)[0]) or None


def _completed(value: str, _item: Any) -> str | None:
    return None if completion_answer(value) else "empty completion"


# Y_model (§4): a base model continues a few-shot "Question: / Answer:" text; free text, no schema.
BASE_ANSWER = LLMTask("double_turn_answer_base", role="answerer", check=_completed)
ANSWER_AFTER = LLMTask("double_turn_answer_after", role="answerer", reply=Answer, check=_usable,
                       sampling={"temperature": 0.0})


def answer_of(parsed: Outcome[Any, Answer] | Parsed[Answer]) -> str | None:
    """The cleaned answer of a usable reply, else None."""
    return clean_answer(parsed.value.answer) if parsed.status is Status.OK and parsed.value else None


def clarify_text(question: str) -> str:
    """A clarifying response as the model should write it (phi checks this prefix)."""
    return f"{CLARIFY_MARK} {question.strip()}"


def message(role: str, content: str) -> dict[str, str]:
    """One chat message."""
    return {"role": role, "content": content}


def dedup_answers(answers: list[str | None]) -> list[str]:
    """Distinct answers by SQuAD normalisation, first spelling and first-seen order kept; empties dropped."""
    out, seen = [], set()
    for a in answers:
        key = normalize_answer(a)
        if key and key not in seen:
            seen.add(key)
            out.append(a.strip())
    return out


def top_k_answers(answers: list[str | None], k: int) -> list[str]:
    """The k most frequent answers by normalised form (ties: first seen first); fewer if fewer distinct."""
    keyed = [(normalize_answer(a), a) for a in answers if a is not None and normalize_answer(a)]
    counts = Counter(k_ for k_, _ in keyed)
    first: dict[str, tuple[int, str]] = {}
    for i, (key, a) in enumerate(keyed):
        first.setdefault(key, (i, a.strip()))
    order = sorted(counts, key=lambda key: (-counts[key], first[key][0]))
    return [first[key][1] for key in order[:k]]


# --------------------------------------------------------------------------- few-shot answers

def shot_pool(qa: pl.DataFrame) -> list[tuple[str, str, str]]:
    """(query_id, question, first gold answer) of every training query: the few-shot exemplars. Evaluation
    queries never enter a prompt that builds training data (their gold answers would leak)."""
    return [(r["query_id"], r["question"], r["gold_answers"][0])
            for r in qa.filter(pl.col("use") == "train").iter_rows(named=True)]


def pick_shots(pool: list[tuple[str, str, str]], query_id: str, n: int, seed: int, round_: int) -> str:
    """A seeded sample of n exemplars (never the query itself), one sample per query and round."""
    others = [p for p in pool if p[0] != query_id]
    rng = random.Random(f"{seed}:{query_id}:{round_}")
    shots = rng.sample(others, min(n, len(others)))
    return "\n".join(f"Question: {q}\nAnswer: {a}" for _, q, a in shots) or "(no examples)"


def few_shot_values(item: dict[str, Any]) -> dict[str, str]:
    """Template values of a few-shot answer item {question, shots}."""
    return {"examples": item["shots"], "question": item["question"]}


def feasible_answer_items(queries: pl.DataFrame, pool: list[tuple[str, str, str]],
                          cfg: DoubleTurnConfig) -> list[dict[str, Any]]:
    """Per query and round: a fresh few-shot prompt, one greedy answer (T=0) and one sample (T=temperature)."""
    items = []
    for q in queries.iter_rows(named=True):
        for r in range(cfg.rounds):
            shots = pick_shots(pool, q["query_id"], cfg.n_shots, cfg.seed, r)
            for decoding, temp in (("greedy", 0.0), ("sampled", cfg.sample_temperature)):
                items.append({"query_id": q["query_id"], "question": q["question"], "round": r,
                              "decoding": decoding, "shots": shots,
                              "sampling": {"temperature": temp, "seed": cfg.seed + r, "n": 1,
                                           "max_tokens": cfg.answer_max_tokens}})
    return items


FEASIBLE_SCHEMA = {
    "query_id": pl.Utf8, "question": pl.Utf8, "is_ambiguous": pl.Boolean, "y_human": pl.List(pl.Utf8),
    "y_human_aliases": pl.List(pl.List(pl.Utf8)), "y_model": pl.List(pl.Utf8),
    "y_model_matches_gold": pl.List(pl.Boolean), "y_model_dropped": pl.List(pl.Utf8), "n_model_answers": pl.Int64, "model_filter_passed": pl.Boolean,
    "filter_reason": pl.Utf8, "sft_human": pl.Boolean, "sft_model": pl.Boolean, "n_calls": pl.Int64,
    "sample_statuses": pl.List(pl.Utf8), "raw_outputs": pl.List(pl.Utf8), **PROVENANCE_SCHEMA}


def feasible_answers(chat: Chat, queries: pl.DataFrame, pool: list[tuple[str, str, str]],
                     cfg: DoubleTurnConfig) -> pl.DataFrame:
    """One row per query: Y_human, Y_model (normalised dedup of all rounds of the base few-shot completion)
    and the NQ-style filter.

    ``model_filter_passed`` is false when no model answer matches any gold alias (the paper drops such
    queries from the Y_model SFT set; here they stay, with ``filter_reason``). With ``y_model_filter:
    answers`` only the matching model answers are kept in ``y_model`` (the others stay in
    ``y_model_dropped``). Every answerer reply is
    kept: ``raw_outputs`` (a list, in call order) and ``raw_output`` (the same list as one JSON string).
    ``sft_human`` / ``sft_model`` say which feasible set is used for SFT data (ambiguous / at least
    ``sft_min_answers`` answers).
    """
    out = BASE_ANSWER.run(chat, feasible_answer_items(queries, pool, cfg), few_shot_values,
                          lambda it: it["sampling"])
    by_query: dict[str, list[Outcome[Any, str]]] = {}
    for o in out:
        by_query.setdefault(o.item["query_id"], []).append(o)
    rows = []
    for q in queries.iter_rows(named=True):
        calls = by_query.get(q["query_id"], [])
        y_model = dedup_answers([completion_answer(o.value) if o.ok else None for o in calls])
        matched = [any(exact_match(a, aliases) for aliases in q["answers"]) for a in y_model]
        passed = any(matched)
        dropped: list[str] = []
        if cfg.y_model_filter == "answers":
            dropped = [a for a, m in zip(y_model, matched, strict=True) if not m]
            y_model, matched = [a for a in y_model if a not in dropped], [True] * (len(y_model) - len(dropped))
        statuses = [o.status.value for o in calls]
        status = Status.OK.value if Status.OK.value in statuses else (statuses[0] if statuses
                                                                      else Status.LLM_ERROR.value)
        errors = [o.error for o in calls if o.error]
        raws = [o.raw_output for o in calls]
        rows.append({
            "query_id": q["query_id"], "question": q["question"], "is_ambiguous": q["is_ambiguous"],
            "y_human": q["gold_answers"], "y_human_aliases": q["answers"],
            "y_model": y_model, "y_model_matches_gold": matched, "y_model_dropped": dropped,
            "n_model_answers": len(y_model),
            "model_filter_passed": passed,
            "filter_reason": None if passed else "no model answer matches any gold answer",
            "sft_human": bool(q["is_ambiguous"] and q["n_interpretations"] >= cfg.sft_min_answers),
            "sft_model": bool(passed and len(y_model) >= cfg.sft_min_answers),
            "n_calls": len(calls), "sample_statuses": statuses, "raw_outputs": raws,
            "raw_output": json.dumps(raws, ensure_ascii=False) if calls else None,
            "status": status, "error": errors[0] if errors and status != Status.OK.value else None,
            "model": calls[0].model if calls else None,
            "prompt_version": calls[0].prompt_version if calls else None,
        })
    return pl.DataFrame(rows, schema=FEASIBLE_SCHEMA)


# --------------------------------------------------------------------------- answers after clarification

def answers_after(chat: Chat, items: list[dict[str, Any]], max_tokens: int,
                  role: str = "answerer") -> list[Outcome[dict[str, Any], Answer]]:
    """(x, q, a_i) -> y_hat_i for items {question, clarifying_question, reply}, one outcome per item."""
    task = dataclasses.replace(ANSWER_AFTER, role=role)
    return task.run(chat, items, lambda it: {"question": it["question"], "clarifying_question":
                                             it["clarifying_question"], "reply": it["reply"]},
                    lambda _: {"max_tokens": max_tokens})
