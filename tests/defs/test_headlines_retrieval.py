"""headlines/retrieval_headline on hand-made runs: every ranker (the fine-tuned one included) on the same test-split
queries only, at one re-ranking depth, n per row, text-only rows when no image reached a model, the paper's rows."""

import dagster as dg
import numpy as np
import polars as pl
import pytest

from dagster_project.config import parse_params
from dagster_project.core.retrieval.rankers import RUN_SCHEMA
from dagster_project.defs.headlines import retrieval as headline
from dagster_project.defs.quality.checks import load_suites, validate_frame
from dagster_project.lib.catalog import describe
from dagster_project.training.model_folder import RESULT_SCHEMA

DOCS = {"d1": "shoes for running", "d2": "alpha guide", "d3": "beta manual", "d4": "gamma notes"}
# query -> (facet, split, relevant doc, query text)
QUERIES = {"t1": ("fA", "test", "d2", "alpha"), "t2": ("fB", "test", "d3", "beta"),
           "r1": ("fC", "train", "d1", "shoes")}


def _rows(qid, ranker, order, stage):
    return [{c: None for c in RUN_SCHEMA} | {
        "query_id": qid, "session_id": qid, "input": "multi_turn", "facet_id": QUERIES[qid][0], "n_turns": 2,
        "ranker": ranker, "modality": "text_only", "run_id": f"{ranker}/multi_turn/text_only", "rank": r, "doc_id": d,
        "score": 10.0 - r, "stage": stage, "query_text": QUERIES[qid][3], "status": "ok", "fallback": False}
        for r, d in enumerate(order, start=1)]


def encode(texts):
    """Bag of words over the documents' first words: the fine-tuned model matches a query to its document."""
    vocab = ["shoes", "alpha", "beta", "gamma"]
    v = np.array([[1.0 if w in t.split() else 0.01 for w in vocab] for t in texts])
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_every_ranker_on_the_test_split_at_one_depth(monkeypatch):
    monkeypatch.setattr(headline, "encoder", lambda folder: encode)
    bm25 = ["d1", "d2", "d3", "d4"]
    runs = []
    for q in QUERIES:
        runs += _rows(q, "bm25", bm25, "first_stage") + _rows(q, "dense_rerank", ["d2", "d1", "d3", "d4"], "dense")
        runs += _rows(q, "generative_rerank", bm25, "generated")
    inferred = pl.DataFrame([{"query_id": q, "facet_id": f, "n_turns": 2, "images": [], "status": "ok",
                              "input": "multi_turn"} for q, (f, _, _, _) in QUERIES.items()],
                            schema_overrides={"images": pl.List(pl.Utf8)})
    training = pl.DataFrame([{"facet_id": f, "split": s} for f, s, _, _ in QUERIES.values()])
    qrels = pl.DataFrame([{"qid": f, "doc_id": d, "rel": 1} for f, _, d, _ in QUERIES.values()])
    documents = pl.DataFrame([{"doc_id": d, "title": None, "text": t, "keyword_id": d} for d, t in DOCS.items()],
                             schema_overrides={"title": pl.Utf8})
    tuned = pl.DataFrame([{"model": "reranker_finetuned", "status": "trained", "folder": "assets/training/rf"}],
                         schema=RESULT_SCHEMA)
    params = parse_params({"retrieval": {"rankers": ["bm25", "dense_rerank", "generative_rerank"],
                                         "inputs": ["multi_turn"], "first_stage_k": 4, "rerank_depth": 2,
                                         "ks": [1, 3]}})
    out = headline.retrieval_headline(dg.build_asset_context(), params=params, runs=pl.DataFrame(runs, schema=RUN_SCHEMA),
                                      qrels=qrels, inferred_queries=inferred, reranker_training=training,
                                      documents=documents, reranker_finetuned=tuned)
    assert not [c for c in out.columns if not describe("headlines/retrieval_headline", c)]
    suite = next(s for s in load_suites() if (s.group, s.asset) == ("headlines", "retrieval_headline"))
    ok, results = validate_frame(out, suite, params)
    assert ok, results
    ours = out.filter((pl.col("system") == "ours") & (pl.col("breakdown") == "overall"))
    rows = {r["ranker"]: r for r in ours.iter_rows(named=True)}
    assert set(rows) == {"bm25", "dense_rerank", "generative_rerank", "finetuned_rerank"}
    assert all(r["n_queries"] == 2 and r["split"] == "test" and r["rerank_depth"] == 2 for r in rows.values())
    assert all(r["images_sent"] == 0 and r["modality"] == "text_only" for r in rows.values())
    # t1: d2 at BM25 rank 2 (inside the depth) moves to rank 1; t2: d3 at rank 3 stays there
    assert rows["finetuned_rerank"]["mrr"] == pytest.approx((1 + 1 / 3) / 2)
    assert rows["bm25"]["mrr"] == pytest.approx((1 / 2 + 1 / 3) / 2)
    assert rows["finetuned_rerank"]["compared_with"] == "dense_rerank" and rows["finetuned_rerank"]["n_paired"] == 2
    assert rows["finetuned_rerank"]["verdict"].startswith("not significant: too few")
    assert rows["bm25"]["verdict"] is None
    published = out.filter(pl.col("system") == "published")
    assert published.height == 14 and published.filter(pl.col("ranker") == "Mario")["modality"].to_list() == [
        "multimodal", "multimodal"]
    # no fine-tuned model: the other rankers stay, each on the same test queries
    skipped = tuned.with_columns(status=pl.lit("skipped_no_data"), folder=pl.lit(None, pl.Utf8))
    out = headline.retrieval_headline(dg.build_asset_context(), params=params, runs=pl.DataFrame(runs, schema=RUN_SCHEMA),
                                      qrels=qrels, inferred_queries=inferred, reranker_training=training,
                                      documents=documents, reranker_finetuned=skipped)
    assert "finetuned_rerank" not in out["ranker"].to_list()
