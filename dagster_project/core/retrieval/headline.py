"""ClariMM Tables 3/4 with the fine-tuned re-ranker: every ranker on the same test-split queries at one re-ranking
depth. The fine-tuned bi-encoder re-orders the BM25 top `depth` of the retrieval group's own first stage, as the
dense and generative re-rankers do; the per-query difference of two rankers is tested paired."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import polars as pl
from scipy import stats

from dagster_project.io.status import Status
from dagster_project.core.retrieval.rankers import RUN_SCHEMA, TEXT_ONLY, dense_rerank, run_rows

FINETUNED = "finetuned_rerank"
Encode = Callable[[list[str]], np.ndarray]


def facets_of_test_split(training: pl.DataFrame) -> set[str]:
    """The facets of the test split (retrieval/reranker_training: facets split train/val/test, §5)."""
    return set(training.filter(pl.col("split") == "test")["facet_id"].unique().to_list())


def finetuned_runs(bm25: pl.DataFrame, encode: Encode, doc_texts: dict[str, str], depth: int,
                   model: str) -> pl.DataFrame:
    """Run rows of the fine-tuned re-ranker: for each query of the bm25 run rows (rank order), its top `depth`
    re-ordered by cosine with the query under `encode` (unit vectors), the rest in BM25 order; status, query text
    and input as the BM25 run had them."""
    rows: list[dict] = []
    if bm25.is_empty():
        return pl.DataFrame(rows, schema=RUN_SCHEMA)
    lists = bm25.sort("rank").group_by("run_id", "query_id", maintain_order=True).agg(
        pl.col("doc_id"), pl.col("score"), pl.all().exclude("doc_id", "score", "rank").first())
    heads = [list(d)[:depth] for d in lists["doc_id"]]
    need = list(dict.fromkeys(d for h in heads for d in h))
    vecs = dict(zip(need, encode([doc_texts[d] for d in need]), strict=True)) if need else {}
    qvecs = encode(lists["query_text"].to_list())
    for r, head, q in zip(lists.iter_rows(named=True), heads, qvecs, strict=True):
        ranked = [(d, s, "dense") for d, s in dense_rerank([q], [head], vecs)[0]] if head else []
        ranked += [(d, s, "first_stage") for d, s in list(zip(r["doc_id"], r["score"]))[depth:]]
        base = {c: r[c] for c in RUN_SCHEMA if c in r and c not in ("rank", "doc_id", "score", "stage", "raw_output")}
        base |= {"ranker": FINETUNED, "modality": TEXT_ONLY, "run_id": f"{FINETUNED}/{r['input']}/{TEXT_ONLY}",
                 "model": model, "prompt_version": None}
        rows += run_rows(base, ranked)
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
