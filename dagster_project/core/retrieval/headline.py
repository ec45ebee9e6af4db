"""ClariMM Tables 3/4 with the trained re-rankers: every ranker on the same test-split queries at one re-ranking
depth. The fine-tuned bi-encoder and the yes/no generative re-rankers (LoRA and its untrained base) re-order the BM25
top `depth` of the retrieval group's own first stage, as the dense and generative re-rankers do; the per-query
difference of two rankers is tested paired."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import polars as pl
from scipy import stats

from dagster_project.io.status import Status
from dagster_project.core.retrieval.rankers import RUN_SCHEMA, TEXT_ONLY, dense_rerank, run_rows
from dagster_project.core.retrieval.yes_no import Score, order_by_score, relevance_prompt

FINETUNED = "finetuned_rerank"
# the yes/no generative re-ranker: training/reranker_generative (LoRA) and the base it was trained from, untrained
YES_NO_LORA, YES_NO_BASE = "yes_no_lora_rerank", "yes_no_base_rerank"
Encode = Callable[[list[str]], np.ndarray]


def facets_of_test_split(training: pl.DataFrame) -> set[str]:
    """The facets of the test split (retrieval/reranker_training: facets split train/val/test, §5)."""
    return set(training.filter(pl.col("split") == "test")["facet_id"].unique().to_list())


def _lists(bm25: pl.DataFrame) -> pl.DataFrame:
    """One row per (run, query) of BM25 run rows: doc_id and score lists in rank order, the rest as the run had it."""
    return bm25.sort("rank").group_by("run_id", "query_id", maintain_order=True).agg(
        pl.col("doc_id"), pl.col("score"), pl.all().exclude("doc_id", "score", "rank").first())


def _reranked(r: dict, head: list[tuple[str, float]], depth: int, stage: str, ranker: str, model: str) -> list[dict]:
    """Run rows of one query: the re-ordered head (`stage`), then the BM25 list below `depth`; status, query text
    and input as the BM25 run had them; text_only (no image reaches these re-rankers)."""
    ranked = [(d, s, stage) for d, s in head]
    ranked += [(d, s, "first_stage") for d, s in list(zip(r["doc_id"], r["score"]))[depth:]]
    base = {c: r[c] for c in RUN_SCHEMA if c in r and c not in ("rank", "doc_id", "score", "stage", "raw_output")}
    base |= {"ranker": ranker, "modality": TEXT_ONLY, "run_id": f"{ranker}/{r['input']}/{TEXT_ONLY}",
             "model": model, "prompt_version": None}
    return run_rows(base, ranked)


def finetuned_runs(bm25: pl.DataFrame, encode: Encode, doc_texts: dict[str, str], depth: int,
                   model: str) -> pl.DataFrame:
    """Run rows of the fine-tuned re-ranker: for each query of the bm25 run rows (rank order), its top `depth`
    re-ordered by cosine with the query under `encode` (unit vectors), the rest in BM25 order."""
    if bm25.is_empty():
        return pl.DataFrame(schema=RUN_SCHEMA)
    lists = _lists(bm25)
    heads = [list(d)[:depth] for d in lists["doc_id"]]
    need = list(dict.fromkeys(d for h in heads for d in h))
    vecs = dict(zip(need, encode([doc_texts[d] for d in need]), strict=True)) if need else {}
    qvecs = encode(lists["query_text"].to_list())
    rows: list[dict] = []
    for r, head, q in zip(lists.iter_rows(named=True), heads, qvecs, strict=True):
        rows += _reranked(r, dense_rerank([q], [head], vecs)[0] if head else [], depth, "dense", FINETUNED, model)
    return pl.DataFrame(rows, schema=RUN_SCHEMA)


def yes_no_runs(bm25: pl.DataFrame, score: Score, doc_texts: dict[str, str], conversations: dict[str, str],
                depth: int, doc_chars: int, ranker: str, model: str) -> pl.DataFrame:
    """Run rows of a yes/no re-ranker (core/retrieval/yes_no.py): every query's top `depth` BM25 candidates
    judged in one batched `score` call (conversation by query_id, '(none)' when absent), each head re-ordered by
    its scores (the score column), the rest in BM25 order."""
    if bm25.is_empty():
        return pl.DataFrame(schema=RUN_SCHEMA)
    lists = _lists(bm25)
    heads = [list(d)[:depth] for d in lists["doc_id"]]
    prompts = [relevance_prompt(r["query_text"], conversations.get(r["query_id"]), doc_texts[d], doc_chars)
               for r, head in zip(lists.iter_rows(named=True), heads, strict=True) for d in head]
    scores = iter(score(prompts) if prompts else [])
    rows: list[dict] = []
    for r, head in zip(lists.iter_rows(named=True), heads, strict=True):
        judged = order_by_score(head, [next(scores) for _ in head])
        rows += _reranked(r, judged, depth, "yes_no", ranker, model)
    return pl.DataFrame(rows, schema=RUN_SCHEMA)


def paired_mrr(per_query: pl.DataFrame, a: str, b: str, metric: str = "mrr") -> dict[str, float | int | None]:
    """Ranker a vs ranker b (text_only) on the queries both were scored on, per input: n, mean difference and the
    paired t-test's p (None below two pairs or when every difference is equal)."""
    side = per_query.filter(pl.col("modality") == TEXT_ONLY)
    both = side.filter(pl.col("ranker") == a).select("input", "query_id", x=metric).join(
        side.filter(pl.col("ranker") == b).select("input", "query_id", y=metric), on=["input", "query_id"])
    d = (both["x"] - both["y"]).to_numpy()
    n = len(d)
    p = float(stats.ttest_rel(both["x"], both["y"]).pvalue) if n >= 2 and np.ptp(d) > 0 else (1.0 if n and not d.any()
                                                                                          else None)
    return {"n": n, "diff": float(d.mean()) if n else None, "p": p}


def images_sent(runs: pl.DataFrame, queries: Sequence[str]) -> dict[str, int]:
    """Per run_id: how many of `queries` went to the model with their images (ok rows of a multimodal run)."""
    mm = runs.filter((pl.col("modality") != TEXT_ONLY) & pl.col("query_id").is_in(list(queries))
                     & (pl.col("status") == Status.OK))
    return dict(mm.group_by("run_id").agg(pl.col("query_id").n_unique()).iter_rows())
