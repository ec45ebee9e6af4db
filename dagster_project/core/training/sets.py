"""Training sets that need more than a format change: the intents top-percentile sweep (one set per kept
percentile, Table 4 made real) and the re-ranker's (query, positive, hard negative) triplets and test rankings."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import polars as pl

from dagster_project.core.intents.curation import top_percentile_cut

RANKING_COLUMNS = ("sdrs_rank", "cut_sdrs", "kept", "removed_reason", "keep_percentile")


def percentile_tag(p: float) -> str:
    """`p85`, `p87.5`: the suffix of a sweep model's name."""
    return f"p{p:g}"


def intents_at_percentile(training: pl.DataFrame, percentile: float, require_correct: bool) -> list[dict[str, Any]]:
    """`messages` records of the intents training set cut at another top percentile: the in-domain conversations
    re-ranked by the same rule as intents/training_conversations (core/intents/curation.top_percentile_cut), plus
    every label-dropout row (they are added, not ranked)."""
    in_domain = training.filter(~pl.col("label_dropout"))
    conv = in_domain.drop([c for c in RANKING_COLUMNS if c in in_domain.columns]).with_columns(
        score_status=pl.lit("unscored"))
    kept = top_percentile_cut(conv, percentile, require_correct).filter(pl.col("kept"))
    dropout = training.filter(pl.col("label_dropout") & pl.col("kept"))
    rows = pl.concat([kept.select("conversation_id", "messages"), dropout.select("conversation_id", "messages")])
    return [{"messages": m} for m in rows.sort("conversation_id")["messages"].to_list()]


def kept_messages(training: pl.DataFrame) -> list[dict[str, Any]]:
    """`messages` records of the rows an export kept (intents/training_conversations' own cut)."""
    return [{"messages": m} for m in training.filter(pl.col("kept")).sort("conversation_id")["messages"].to_list()]


def reranker_triplets(examples: pl.DataFrame, doc_texts: dict[str, str], split: str = "train") -> list[dict[str, str]]:
    """(anchor = the query the ranker searches with, positive = the relevant document, negative = its hardest BM25
    negative) per kept row of `split`; a row without a negative keeps only the in-batch negatives (negative = "")."""
    rows = examples.filter(pl.col("kept") & (pl.col("split") == split))
    out = []
    for r in rows.iter_rows(named=True):
        negs = [d for d in r["negative_doc_ids"] if d in doc_texts]
        out.append({"anchor": r["query_text"], "positive": doc_texts[r["positive_doc_id"]],
                    "negative": doc_texts[negs[0]] if negs else ""})
    return out


def rerank_candidates(examples: pl.DataFrame, doc_texts: dict[str, str], split: str = "test",
                      ) -> tuple[dict[str, dict[str, int]], dict[str, str], dict[str, list[str]]]:
    """The held-out ranking task of the re-ranker export: per kept row of `split` (example_id) its qrels
    ({positive: 1}), query text and candidate documents (the positive + BM25 negatives)."""
    rows = examples.filter(pl.col("kept") & (pl.col("split") == split))
    qrels, queries, cands = {}, {}, {}
    for r in rows.iter_rows(named=True):
        qrels[r["example_id"]] = {r["positive_doc_id"]: 1}
        queries[r["example_id"]] = r["query_text"]
        cands[r["example_id"]] = [d for d in r["candidate_doc_ids"] if d in doc_texts]
    return qrels, queries, cands


def rank_by_embedding(encode: Callable[[list[str]], np.ndarray], queries: dict[str, str],
                      candidates: dict[str, Sequence[str]], doc_texts: dict[str, str]) -> dict[str, list[str]]:
    """Each query's candidates ordered by cosine with the query (`encode` returns unit vectors); ties keep the
    given order."""
    docs = sorted({d for c in candidates.values() for d in c})
    if not queries or not docs:
        return {q: [] for q in queries}
    dvec = dict(zip(docs, encode([doc_texts[d] for d in docs]), strict=True))
    qids = list(queries)
    qvec = encode([queries[q] for q in qids])
    out = {}
    for q, v in zip(qids, qvec, strict=True):
        cands = list(candidates[q])
        scores = [float(np.dot(v, dvec[d])) for d in cands]
        out[q] = [cands[i] for i in sorted(range(len(cands)), key=lambda i: -scores[i])]
    return out
