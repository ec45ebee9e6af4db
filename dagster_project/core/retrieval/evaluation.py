"""ClariMM §5 / §6.1 evaluation: which (run, query) pairs are expected, then MRR, P@k and nDCG@k (trec_eval via
pytrec_eval, see metrics.py) per ranker x input (multi/single turn) x modality, overall, by number of turns and
on the queries that carry images."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import polars as pl

from dagster_project.core.retrieval.rankers import MULTIMODAL, TEXT_ONLY
from dagster_project.llm.task import Status


def relevant_by_facet(qrels: pl.DataFrame) -> dict[str, dict[str, int]]:
    """facet -> {doc: rel} for facets with at least one relevant (rel > 0) document; negative grades become 0."""
    out: dict[str, dict[str, int]] = {}
    for r in qrels.iter_rows(named=True):
        out.setdefault(r["qid"], {})[r["doc_id"]] = max(int(r["rel"]), 0)
    return {f: d for f, d in out.items() if any(v > 0 for v in d.values())}


INFERRED_QUERY_RANKERS = ("bm25", "dense_rerank", "generative_rerank")


def expected_queries(inferred: pl.DataFrame, runs: pl.DataFrame, rankers: Sequence[str]) -> pl.DataFrame:
    """Every (run_id, query) a run should answer, with the status that decides whether it is evaluated.

    A query with an empty ranking (no BM25 hit) is still expected and scores 0. Status comes from the run's
    rows when it has any; otherwise it is input_error for rankers that search the inferred query when that
    query failed, else ok. Multimodal runs expect only queries whose turns carry images.
    """
    present = runs.group_by("run_id", "query_id").agg(pl.col("status").first().alias("run_status"))
    modalities = {(r, m) for r, m in runs.select("ranker", "modality").unique().iter_rows()}
    frames = []
    for ranker in rankers:
        for modality in (TEXT_ONLY, MULTIMODAL):
            if modality == MULTIMODAL and (ranker, modality) not in modalities:
                continue
            q = inferred if modality == TEXT_ONLY else inferred.filter(pl.col("images").list.len() > 0)
            fallback = (pl.when(pl.col("status") == Status.OK.value).then(pl.lit(Status.OK.value))
                        .otherwise(pl.lit(Status.INPUT_ERROR.value))
                        if ranker in INFERRED_QUERY_RANKERS else pl.lit(Status.OK.value))
            frames.append(q.select(
                pl.format("{}/{}/{}", pl.lit(ranker), pl.col("input"), pl.lit(modality)).alias("run_id"),
                pl.lit(ranker).alias("ranker"), "input", pl.lit(modality).alias("modality"), "query_id", "facet_id",
                "n_turns", (pl.col("images").list.len() > 0).alias("has_images"), fallback.alias("fallback_status")))
    if not frames:
        return pl.DataFrame(schema={"run_id": pl.Utf8, "ranker": pl.Utf8, "input": pl.Utf8, "modality": pl.Utf8,
                                    "query_id": pl.Utf8, "facet_id": pl.Utf8, "n_turns": pl.Int64,
                                    "has_images": pl.Boolean, "status": pl.Utf8})
    exp = pl.concat(frames).join(present, on=["run_id", "query_id"], how="left")
    return exp.with_columns(status=pl.coalesce("run_status", "fallback_status")).drop("run_status", "fallback_status")


def generated_share(runs: pl.DataFrame, rerank_depth: int) -> pl.DataFrame:
    """Per (run_id, query_id) of a generative run: the share of its top min(rerank_depth, length) ranks that the
    re-ranker generated (1.0 for a full generated ranking, 0.0 for a first-stage fallback)."""
    if not {"ranker", "stage"} <= set(runs.columns):  # not a generative run table
        return pl.DataFrame(schema={"run_id": pl.Utf8, "query_id": pl.Utf8, "generated_share": pl.Float64})
    gen = runs.filter((pl.col("ranker") == "generative_rerank") & (pl.col("rank") <= rerank_depth))
    return gen.group_by("run_id", "query_id").agg(
        ((pl.col("stage") == "generated").sum() / pl.len()).cast(pl.Float64).alias("generated_share"))


def evaluation_table(runs: pl.DataFrame, expected: pl.DataFrame, qrels: pl.DataFrame, ks: Sequence[int],
                     evaluate: Callable[..., pl.DataFrame], failed_rerank: str = "first_stage",
                     rerank_depth: int = 10) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per-query scores for every run_id, then means overall, by number of turns and on the image subset.

    expected: (run_id, ranker, input, modality, query_id, facet_id, n_turns, status[, has_images]), see
    expected_queries. Every ranker is scored on the SAME queries: those whose facet has a relevant document and,
    with failed_rerank="drop_query", that no ranker failed on (a failure removes the query from every ranker);
    with "first_stage" (default) a failed query is scored on the first-stage order it kept and counted in
    n_fallback. The others are counted in n_excluded. A group with nothing to evaluate stays in the table with
    n_queries 0 and null metrics. generated_share: mean share of the top rerank_depth ranks the generative
    re-ranker produced itself (null for other rankers). When a multimodal run exists, breakdown 'with_images' repeats the means of every run over
    only the queries whose turns carry images: the multimodal run covers just those, so text_only vs
    multimodal is compared there, on the same queries, never across different populations.
    `evaluate(qrels, rankings, ks)` is core.metrics.ranking_metrics (pytrec_eval). Returns (table, per-query).
    """
    judged = relevant_by_facet(qrels)
    metric_cols = ["mrr", *[f"p_at_{k}" for k in ks], *[f"ndcg_at_{k}" for k in ks]]
    failed = pl.col("status") != Status.OK.value
    usable = pl.col("facet_id").is_in(list(judged))
    if failed_rerank == "drop_query":
        usable = usable & ~pl.col("query_id").is_in(expected.filter(failed)["query_id"].unique().to_list())
    exp = expected.with_columns(usable=usable, fallback=failed)
    ranking = {(r, q): list(d) for r, q, d in runs.sort("rank").group_by("run_id", "query_id", maintain_order=True)
               .agg(pl.col("doc_id")).iter_rows()}
    frames = []
    for (run_id,), g in exp.filter(pl.col("usable")).group_by(["run_id"], maintain_order=True):
        q_rels = {r["query_id"]: judged[r["facet_id"]] for r in g.iter_rows(named=True)}
        scores = evaluate(q_rels, {q: ranking.get((run_id, q), []) for q in q_rels}, ks)
        frames.append(scores.with_columns(run_id=pl.lit(run_id)))
    per_query_schema = {"query_id": pl.Utf8, **{c: pl.Float64 for c in metric_cols}, "run_id": pl.Utf8}
    scores = pl.concat(frames) if frames else pl.DataFrame(schema=per_query_schema)
    joined = exp.join(scores, on=["run_id", "query_id"], how="left").join(
        generated_share(runs, rerank_depth), on=["run_id", "query_id"], how="left")
    keys = ["ranker", "input", "modality"]
    aggs = [pl.col("usable").sum().cast(pl.Int64).alias("n_queries"),
            (pl.col("usable") & pl.col("fallback")).sum().cast(pl.Int64).alias("n_fallback"),
            (~pl.col("usable")).sum().cast(pl.Int64).alias("n_excluded"),
            *[pl.col(c).mean() for c in metric_cols],
            pl.col("generated_share").filter(pl.col("usable")).mean()]
    overall = joined.group_by(keys).agg(aggs).with_columns(breakdown=pl.lit("overall"),
                                                           n_turns=pl.lit(None, pl.Int64))
    by_turns = joined.group_by([*keys, "n_turns"]).agg(aggs).with_columns(breakdown=pl.lit("by_turns"))
    cols = ["breakdown", *keys, "n_turns", "n_queries", "n_fallback", "n_excluded", *metric_cols, "generated_share"]
    parts = [overall.select(cols), by_turns.select(cols)]
    if "has_images" in joined.columns and (joined["modality"] == MULTIMODAL).any():
        parts.append(joined.filter(pl.col("has_images")).group_by(keys).agg(aggs)
                     .with_columns(breakdown=pl.lit("with_images"), n_turns=pl.lit(None, pl.Int64)).select(cols))
    order = {"overall": 0, "by_turns": 1, "with_images": 2}
    table = pl.concat(parts).with_columns(_o=pl.col("breakdown").replace_strict(order, return_dtype=pl.Int64)).sort(
        "_o", "input", "ranker", "modality", "n_turns", nulls_last=False).drop("_o")
    per_query = joined.filter(pl.col("usable")).select("run_id", *keys, "query_id", "facet_id", "n_turns",
                                                       "fallback", *metric_cols)
    return table, per_query
