"""ClariMM Tables 3 (multi-turn) and 4 (single-turn) with the fine-tuned re-ranker: BM25, BM25 on the history,
the dense (base MiniLM), generative and fine-tuned (training/reranker_finetuned) re-rankers on the same test-split
queries at one re-ranking depth (retrieval.rerank_depth), n per row, beside the paper's rows."""


from collections.abc import Callable

import dagster as dg
import numpy as np
import polars as pl

from dagster_project.config import Params
from dagster_project.core.retrieval.documents import document_text
from dagster_project.core.retrieval.evaluation import evaluation_table, expected_queries
from dagster_project.core.retrieval.headline import (
    FINETUNED,
    facets_of_test_split,
    finetuned_runs,
    images_sent,
    paired_mrr,
)
from dagster_project.core.retrieval.metrics import ranking_metrics
from dagster_project.core.retrieval.rankers import TEXT_ONLY
from dagster_project.core.shared.tables import markdown_table
from dagster_project.defs.headlines.common import GROUP, SERVABLE
from dagster_project.defs.headlines.published import CLARIMM, CLARIMM_SOURCE, verdict
from dagster_project.lib.assets import group_asset, upstream

asset = group_asset(GROUP)
# ranker -> the one it is tested against: the trained re-ranker vs its base MiniLM, the generative one vs BM25
REFERENCES = {FINETUNED: "dense_rerank", "generative_rerank": "bm25"}
NO_IMAGES = ("no image reached any model: every row is text-only (the QA data carries no images, or "
             "retrieval.reranker_vision is off / the reranker backend takes no images)")


def encoder(folder: str) -> Callable[[list[str]], np.ndarray]:
    """Unit vectors from the sentence-transformers model in `folder` (the fine-tuned MiniLM)."""
    from dagster_project.llm.embedder import encode

    return lambda texts: encode(texts, folder)


def _finetuned(table: pl.DataFrame) -> tuple[str | None, str | None]:
    """(folder, why not served) of training/reranker_finetuned."""
    if table.is_empty():
        return None, "training/reranker_finetuned has no row"
    r = table.row(0, named=True)
    if r["status"] not in SERVABLE or not r["folder"]:
        return None, f"training/reranker_finetuned: {r['status']} ({r['reason'] or 'no folder'})"
    return r["folder"], None


def _verdicts(per_query: pl.DataFrame, params: Params) -> pl.DataFrame:
    ev = params.evaluation
    rows = []
    for ranker, ref in REFERENCES.items():
        for inp in params.retrieval.inputs:
            t = paired_mrr(per_query.filter(pl.col("input") == inp), ranker, ref)
            rows.append({"ranker": ranker, "input": inp, "compared_with": ref, "n_paired": t["n"],
                         "mrr_diff": t["diff"], "p_value": t["p"],
                         "verdict": verdict(t["n"], t["diff"], t["p"], ev.significance_alpha, ev.min_n_significance,
                                            "test queries")})
    return pl.DataFrame(rows, schema={"ranker": pl.Utf8, "input": pl.Utf8, "compared_with": pl.Utf8,
                                      "n_paired": pl.Int64, "mrr_diff": pl.Float64, "p_value": pl.Float64,
                                      "verdict": pl.Utf8})


@asset(ins=upstream("retrieval/runs", "retrieval/qrels", "retrieval/inferred_queries", "retrieval/reranker_training",
                    "retrieval/documents", "training/reranker_finetuned"))
def retrieval_headline(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params], runs: pl.DataFrame,
                       qrels: pl.DataFrame, inferred_queries: pl.DataFrame, reranker_training: pl.DataFrame,
                       documents: pl.DataFrame, reranker_finetuned: pl.DataFrame) -> pl.DataFrame:
    """Per ranker x input (multi/single turn) x modality on the test-split queries only: n_queries (the same for
    every ranker), MRR, P@k, nDCG@k, the depth every re-ranker re-ordered, how many queries' images reached the
    model (a row is multimodal only then), the fine-tuned vs base MiniLM and generative vs BM25 paired tests with
    a verdict; the paper's Table 3/4 rows beside (system `published`)."""
    cfg = params.retrieval
    facets = facets_of_test_split(reranker_training)
    test_q = inferred_queries.filter(pl.col("facet_id").is_in(list(facets)))
    qids = test_q["query_id"].to_list()
    test_runs = runs.filter(pl.col("query_id").is_in(qids))
    folder, why = _finetuned(reranker_finetuned)
    rankers = list(cfg.rankers)
    if folder and "bm25" in rankers:
        texts = {d: document_text(t, x) for d, t, x in documents.select("doc_id", "title", "text").iter_rows()}
        ft = finetuned_runs(test_runs.filter(pl.col("ranker") == "bm25"), encoder(folder), texts, cfg.rerank_depth,
                            folder)
        test_runs, rankers = pl.concat([test_runs, ft], how="diagonal_relaxed"), [*rankers, FINETUNED]
    elif folder:
        why = "retrieval.rankers has no bm25: the fine-tuned re-ranker re-orders the BM25 first stage"
    expected = expected_queries(test_q, test_runs, rankers)
    table, per_query = evaluation_table(test_runs, expected, qrels, cfg.ks, ranking_metrics, cfg.failed_rerank,
                                        cfg.rerank_depth)
    sent = images_sent(test_runs, qids)
    table = (table.filter(pl.col("breakdown") != "by_turns").drop("n_turns")
             .with_columns(split=pl.lit("test"), rerank_depth=pl.lit(cfg.rerank_depth),
                           images_sent=pl.format("{}/{}/{}", "ranker", "input", "modality")
                           .replace_strict(sent, default=0, return_dtype=pl.Int64),
                           system=pl.lit("ours"), source=pl.lit("retrieval/runs + training/reranker_finetuned")))
    table = table.with_columns(modality=pl.when((pl.col("modality") != TEXT_ONLY) & (pl.col("images_sent") == 0))
                               .then(pl.lit(TEXT_ONLY)).otherwise(pl.col("modality")))
    tests = _verdicts(per_query, params)
    table = table.join(tests, on=["ranker", "input"], how="left")
    table = table.with_columns(uses_images=pl.col("images_sent") > 0)
    published = pl.DataFrame(CLARIMM).rename({"images": "uses_images"}).with_columns(
        *[pl.col(c) / 100 for c in ("mrr", "p_at_1", "p_at_3", "p_at_5", "ndcg_at_1", "ndcg_at_3", "ndcg_at_5")],
        system=pl.lit("published"), breakdown=pl.lit("overall"),
        modality=pl.when(pl.col("uses_images")).then(pl.lit("multimodal")).otherwise(pl.lit(TEXT_ONLY)))
    out = pl.concat([table, published], how="diagonal_relaxed")
    overall = table.filter(pl.col("breakdown") == "overall")
    context.add_output_metadata({
        "test_queries": len(qids), "test_facets": len(facets), "rerank_depth": cfg.rerank_depth,
        "images": NO_IMAGES if not sum(sent.values()) else dg.MetadataValue.json(sent),
        "finetuned": folder or why,
        "table": dg.MetadataValue.md(markdown_table(overall.select(
            "input", "ranker", "modality", "n_queries", "n_excluded", "mrr", *[f"p_at_{k}" for k in cfg.ks],
            *[f"ndcg_at_{k}" for k in cfg.ks], "images_sent"))),
        "comparisons": dg.MetadataValue.md(markdown_table(tests, plain=["mrr_diff", "p_value"])),
        "published_source": CLARIMM_SOURCE,
        **{f"verdict/{r['ranker']}_{r['input']}": r["verdict"] for r in tests.iter_rows(named=True)}})
    return out
