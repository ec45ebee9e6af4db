"""Are the evaluation queries held out? Every overlap between them and the user messages a model was trained on:
the same normalised text, or a near-duplicate by embedding cosine (the held_out_disjoint check)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable

import numpy as np
import polars as pl


def normalize_query(text: str) -> str:
    """Case, accents, punctuation and spacing folded away: 'What's  the time?' == 'whats the time'."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return " ".join(re.sub(r"[^\w\s]", "", text.lower()).split())


def user_texts(frame: pl.DataFrame) -> list[str]:
    """Every user message of a training export (message-list columns) plus its question / query columns; rows a
    `kept` column marks as not kept are not trained on and are skipped."""
    if "kept" in frame.columns:
        frame = frame.filter(pl.col("kept"))
    texts: list[str] = []
    for name, dtype in frame.schema.items():
        if isinstance(dtype, pl.List) and isinstance(dtype.inner, pl.Struct) \
                and {"role", "content"} <= {f.name for f in dtype.inner.fields}:
            msgs = frame.select(pl.col(name).explode().struct.unnest()).drop_nulls("role")
            texts += msgs.filter(pl.col("role") == "user")["content"].drop_nulls().to_list()
        elif name in ("question", "query") and dtype == pl.Utf8:
            texts += frame[name].drop_nulls().to_list()
    return texts


def record_user_texts(records: Iterable[dict]) -> list[str]:
    """Every user message of JSONL training records (their `messages` or `prompt` message lists)."""
    texts = []
    for rec in records:
        for field in ("messages", "prompt"):
            for m in rec.get(field) or []:
                if isinstance(m, dict) and m.get("role") == "user" and isinstance(m.get("content"), str):
                    texts.append(m["content"])
    return texts


OVERLAP_SCHEMA = {"export": pl.Utf8, "query": pl.Utf8, "training_text": pl.Utf8, "match": pl.Utf8,
                  "cosine": pl.Float64}


def held_out_overlaps(eval_queries: Iterable[str], exports: dict[str, list[str]],
                      encode: Callable[[list[str]], np.ndarray], min_cosine: float,
                      block: int = 2048) -> pl.DataFrame:
    """Every (export, evaluation query, training text) pair that overlaps: the same text once case, accents,
    punctuation and spacing are folded away (match "exact"), or a MiniLM cosine at or above `min_cosine` ("near";
    `encode` returns unit vectors). One row per pair, exact ones first."""
    queries = sorted({q for q in eval_queries if q and normalize_query(q)})
    rows = []
    if not queries:
        return pl.DataFrame(schema=OVERLAP_SCHEMA)
    qvec = encode(queries)
    qnorm = [normalize_query(q) for q in queries]
    for export, texts in exports.items():
        distinct = sorted({t for t in texts if t and normalize_query(t)})
        by_norm: dict[str, list[str]] = {}
        for t in distinct:
            by_norm.setdefault(normalize_query(t), []).append(t)
        exact = set()
        for i, n in enumerate(qnorm):
            for t in by_norm.get(n, []):
                exact.add((i, t))
                rows.append({"export": export, "query": queries[i], "training_text": t, "match": "exact",
                             "cosine": None})
        for start in range(0, len(distinct), block):
            chunk = distinct[start:start + block]
            sims = np.asarray(qvec) @ np.asarray(encode(chunk)).T
            for i, j in zip(*np.nonzero(sims >= min_cosine), strict=True):
                if (int(i), chunk[j]) not in exact:
                    rows.append({"export": export, "query": queries[i], "training_text": chunk[j], "match": "near",
                                 "cosine": round(float(sims[i, j]), 4)})
    return pl.DataFrame(rows, schema=OVERLAP_SCHEMA).sort("match", "export", "query", maintain_order=True)
