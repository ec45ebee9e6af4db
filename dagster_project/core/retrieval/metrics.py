"""Ranking metrics for ClariMM retrieval: MRR, P@k, nDCG@k."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl


def ranking_metrics(qrels: dict[str, dict[str, int]], rankings: dict[str, Sequence[str]],
                    ks: Sequence[int] = (1, 3, 5)) -> pl.DataFrame:
    """Per-query MRR, P@k and nDCG@k of ranked doc lists, computed by trec_eval (pytrec_eval).

    qrels: query -> {doc: relevance grade} (relevant: grade >= 1); rankings: query -> doc ids best first
    (may be empty: scores 0, as ``trec_eval -c`` counts missing queries). Every query of qrels gets a row;
    queries only in rankings are ignored. The order of each list is what counts: trec_eval sees score
    1/rank, so raw scores and their ties play no part. nDCG uses linear gains (trec_eval ndcg_cut).
    Columns: query_id, mrr, p_at_<k>, ndcg_at_<k>.
    """
    import pytrec_eval

    cols = ["mrr", *[f"p_at_{k}" for k in ks], *[f"ndcg_at_{k}" for k in ks]]
    names = ["recip_rank", *[f"P_{k}" for k in ks], *[f"ndcg_cut_{k}" for k in ks]]
    schema = {"query_id": pl.Utf8, **{c: pl.Float64 for c in cols}}
    run = {q: {d: 1.0 / r for r, d in enumerate(dict.fromkeys(rankings.get(q, [])), start=1)} for q in qrels}
    run = {q: docs for q, docs in run.items() if docs}
    judged = {q: {d: int(g) for d, g in docs.items()} for q, docs in qrels.items()}
    scores = pytrec_eval.RelevanceEvaluator(judged, set(names)).evaluate(run) if run else {}
    return pl.DataFrame({"query_id": list(qrels),
                         **{c: [float(scores.get(q, {}).get(n, 0.0)) for q in qrels] for c, n in zip(cols, names)}},
                        schema=schema)
