"""Train / evaluation split (paper §4 Data, Appendix A.1: training queries are removed from what the
systems are evaluated on): disjoint by construction, and the check that proves it on what was exported.

A query of a `split: both` file goes to evaluation when a seeded hash of its id falls below
``eval_fraction``; the assignment depends only on (seed, query id), so adding files never moves a query.
Training queries are drawn the same way into an SFT and a DPO stage (``sft_fraction``), disjoint as in the paper.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import polars as pl

from dagster_project.core.double_turn.metrics import normalize_answer

USES = ("train", "eval")


def hashed_use(query_id: str, seed: int, eval_fraction: float) -> str:
    """"eval" or "train" for one query of a `split: both` file (seeded sha256 of the id, uniform in [0, 1))."""
    digest = hashlib.sha256(f"{seed}:{query_id}".encode()).digest()
    return "eval" if int.from_bytes(digest[:8], "big") / 2**64 < eval_fraction else "train"


def train_stage(query_id: str, seed: int, sft_fraction: float) -> str:
    """"sft" or "dpo" for one training query: the paper trains SFT and DPO on disjoint questions (seeded sha256 of
    the id, salted apart from the train / eval draw)."""
    digest = hashlib.sha256(f"{seed}:stage:{query_id}".encode()).digest()
    return "sft" if int.from_bytes(digest[:8], "big") / 2**64 < sft_fraction else "dpo"


def stage_queries(queries: pl.DataFrame, stage: str, seed: int, sft_fraction: float | None) -> pl.DataFrame:
    """The training queries of one stage (sft: SFT data; dpo: candidates and preference pairs); with
    sft_fraction None both stages use every training query."""
    if sft_fraction is None:
        return queries
    keep = [train_stage(q, seed, sft_fraction) == stage for q in queries["query_id"]]
    return queries.filter(pl.Series(keep, dtype=pl.Boolean))


def shared_queries(sft: pl.DataFrame, pairs: pl.DataFrame) -> list[str]:
    """Query ids that reached both the SFT rows and the preference pairs (empty when the stages are disjoint)."""
    return sorted(set(sft["query_id"].to_list()) & set(pairs["query_id"].to_list()))


def assign_use(qa: pl.DataFrame, seed: int, eval_fraction: float) -> pl.DataFrame:
    """Add ``use`` (train | eval): a file's own split, or the seeded hash for `split: both` files."""
    uses = [s if s in USES else hashed_use(q, seed, eval_fraction)
            for q, s in zip(qa["query_id"], qa["split"], strict=True)]
    return qa.with_columns(pl.Series("use", uses, dtype=pl.Utf8))


def _question_key(text: str | None) -> str:
    return normalize_answer(text)


def export_texts(record: dict[str, Any]) -> Iterable[str]:
    """Every message text of a TRL record (messages, or prompt / chosen / rejected)."""
    for key in ("messages", "prompt", "chosen", "rejected"):
        value = record.get(key)
        if isinstance(value, list):
            yield from (m.get("content") or "" for m in value if isinstance(m, dict))
        elif isinstance(value, str):
            yield value


def _contained(words: list[str], index: dict[tuple[str, ...], list[tuple[list[str], str]]]) -> str | None:
    """The id of an indexed question that occurs as whole words in ``words`` (index: first two words ->
    questions), so a record is scanned once whatever the number of evaluation questions."""
    for i in range(len(words)):
        for prefix in (tuple(words[i:i + 2]), (words[i],)):
            for q, qid in index.get(prefix, ()):
                if words[i:i + len(q)] == q:
                    return qid
    return None


def train_eval_overlap(train_tables: dict[str, pl.DataFrame], exports: dict[str, list[dict[str, Any]]],
                       eval_queries: pl.DataFrame) -> pl.DataFrame:
    """Every leak of an evaluation query into training data, one row each (none = disjoint).

    ``train_tables``: name -> a table with query_id and question (the rows training data is built from);
    a row leaks when its id is an evaluation id or its question is an evaluation question (normalised).
    ``exports``: name -> TRL records; a record leaks when one of its messages contains an evaluation
    question (normalised, as a substring: the question sits inside a rendered prompt).
    """
    eval_ids = set(eval_queries["query_id"])
    eval_q = {_question_key(q): qid for qid, q in zip(eval_queries["query_id"], eval_queries["question"],
                                                      strict=True) if _question_key(q)}
    rows = []
    for name, table in train_tables.items():
        for r in table.select("query_id", "question").unique(maintain_order=True).iter_rows(named=True):
            key = _question_key(r["question"])
            if r["query_id"] in eval_ids or key in eval_q:
                rows.append({"source": name, "record": r["query_id"],
                             "eval_query_id": r["query_id"] if r["query_id"] in eval_ids else eval_q[key],
                             "reason": "evaluation query id" if r["query_id"] in eval_ids else "evaluation question"})
    index: dict[tuple[str, ...], list[tuple[list[str], str]]] = {}
    for key, qid in eval_q.items():
        words = key.split()
        index.setdefault(tuple(words[:2]), []).append((words, qid))
    for name, records in exports.items():
        for i, rec in enumerate(records):
            hit = _contained(" ".join(_question_key(t) for t in export_texts(rec)).split(), index)
            if hit is not None:
                rows.append({"source": f"export:{name}", "record": str(i), "eval_query_id": hit,
                             "reason": "evaluation question in a training example"})
    return pl.DataFrame(rows, schema={"source": pl.Utf8, "record": pl.Utf8, "eval_query_id": pl.Utf8,
                                      "reason": pl.Utf8})
