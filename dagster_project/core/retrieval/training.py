"""Training data for the generative re-ranker (ClariMM §4.3.2 / §5): per session and relevant document, the first
constrained decoding step rendered exactly as inference renders it, with BM25 negatives as the other candidates,
as TRL prompt-completion records; facets split train/val/test 80/10/10 (§5), test topics marked seen/unseen (§6)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from dagster_project.config import RetrievalConfig
from dagster_project.core.retrieval.documents import document_text, snippet
from dagster_project.core.retrieval.rankers import BM25Index
from dagster_project.core.retrieval.reranking import rerank_step_request
from dagster_project.llm.task import Status

SPLITS = ("train", "val", "test")
MESSAGES = pl.List(pl.Struct({"role": pl.Utf8, "content": pl.Utf8}))
TRAINING_SCHEMA = {
    "example_id": pl.Utf8, "query_id": pl.Utf8, "session_id": pl.Utf8, "input": pl.Utf8, "topic_id": pl.Utf8,
    "facet_id": pl.Utf8, "split": pl.Utf8, "topic_seen": pl.Boolean, "positive_doc_id": pl.Utf8,
    "negative_doc_ids": pl.List(pl.Utf8), "candidate_doc_ids": pl.List(pl.Utf8), "query_text": pl.Utf8,
    "prompt": MESSAGES, "completion": MESSAGES, "kept": pl.Boolean, "reject_reason": pl.Utf8,
}


def facet_splits(facets: Sequence[str], shares: Sequence[float], seed: int) -> dict[str, str]:
    """Each facet -> train / val / test, by a seeded permutation cut at the cumulative shares (rounded)."""
    ordered = sorted(set(facets))
    perm = np.random.default_rng(seed).permutation(len(ordered))
    cuts = [round(len(ordered) * sum(shares[:k + 1])) for k in range(len(SPLITS))]
    out = {}
    for pos, i in enumerate(perm):
        out[ordered[int(i)]] = next(s for s, c in zip(SPLITS, cuts) if pos < c) if pos < cuts[-1] else SPLITS[-1]
    return out


def _reject(base: dict[str, Any], reason: str) -> dict[str, Any]:
    return {**base, "positive_doc_id": None, "negative_doc_ids": [], "candidate_doc_ids": [], "prompt": [],
            "completion": [], "kept": False, "reject_reason": reason}


def training_examples(inferred: pl.DataFrame, documents: pl.DataFrame, relevant: dict[str, dict[str, int]],
                      facets: Sequence[str], cfg: RetrievalConfig) -> pl.DataFrame:
    """One kept row per (query, relevant document): candidates = that document + cfg.training_negatives BM25 hits
    of the query that are not relevant to its facet, shuffled with a seed (so the answer's position carries no
    signal; inference shows BM25 order); prompt = the step-1 request inference sends (same template, schema enum
    over the candidates' keyword IDs), completion = the positive's keyword ID as the reply inference parses.
    A query searches what inference searches (the inferred query, else the initial request). `facets` (every
    facet of the QA data) are split by cfg.facet_split; topic_seen says whether the topic has a training facet.
    Queries whose facet has no relevant document stay as kept=False rows with the reason."""
    doc_texts = {d: document_text(t, x) for d, t, x in documents.select("doc_id", "title", "text").iter_rows()}
    kid = dict(documents.select("doc_id", "keyword_id").iter_rows())
    split = facet_splits([*facets, *inferred["facet_id"].to_list()], cfg.facet_split, cfg.seed)
    train_topics = {t for t, f in inferred.select("topic_id", "facet_id").iter_rows() if split.get(f) == "train"}
    if inferred.is_empty():
        return pl.DataFrame(schema=TRAINING_SCHEMA)
    rows: list[dict[str, Any]] = []
    texts = [r["inferred_query"] if r["status"] == Status.OK.value and r["inferred_query"] else r["initial_request"]
             for r in inferred.iter_rows(named=True)]
    hits = BM25Index(list(doc_texts), list(doc_texts.values())).search(texts, cfg.first_stage_k)
    rng = np.random.default_rng(cfg.seed)
    for r, text, found in zip(inferred.iter_rows(named=True), texts, hits, strict=True):
        base = {"query_id": r["query_id"], "session_id": r["session_id"], "input": r["input"],
                "topic_id": r["topic_id"], "facet_id": r["facet_id"], "split": split[r["facet_id"]],
                "topic_seen": r["topic_id"] in train_topics, "query_text": text}
        rel = relevant.get(r["facet_id"], {})
        positives = [d for d, g in rel.items() if g > 0 and d in doc_texts]
        if not positives:
            rows.append(_reject({**base, "example_id": f"{r['query_id']}|none"}, "facet has no relevant document"))
            continue
        negatives = [d for d, _ in found if rel.get(d, 0) <= 0][:cfg.training_negatives]
        for pos in sorted(positives):
            cands = [pos, *negatives]
            order = [cands[i] for i in rng.permutation(len(cands))]
            req = rerank_step_request(text, r["conversation"],
                                      [(kid[d], snippet(doc_texts[d], cfg.snippet_chars)) for d in order], [])
            rows.append({**base, "example_id": f"{r['query_id']}|{pos}", "positive_doc_id": pos,
                         "negative_doc_ids": negatives, "candidate_doc_ids": order, "prompt": req.messages,
                         "completion": [{"role": "assistant", "content": json.dumps({"next": kid[pos]})}],
                         "kept": True, "reject_reason": None})
    return pl.DataFrame(rows, schema=TRAINING_SCHEMA)


def trl_records(examples: pl.DataFrame, split: str) -> list[dict[str, Any]]:
    """Kept rows of one split as TRL conversational prompt-completion records (a JSONL line each)."""
    kept = examples.filter(pl.col("kept") & (pl.col("split") == split))
    return [{"prompt": p, "completion": c} for p, c in kept.select("prompt", "completion").iter_rows()]
