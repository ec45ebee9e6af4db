"""ClariMM Tables 3 (multi-turn) and 4 (single-turn) with the trained re-rankers: BM25, BM25 on the history, the
dense (base MiniLM), generative and fine-tuned (training/reranker_finetuned) re-rankers and the yes/no generative
re-ranker (training/reranker_generative, beside its untrained base) on the same test-split queries at one re-ranking
depth (retrieval.rerank_depth), n per row, beside the paper's rows."""


import time
from collections.abc import Callable
from typing import Any

import dagster as dg
import numpy as np
import polars as pl

from dagster_project.config import Params
from dagster_project.core.retrieval.documents import document_text
from dagster_project.core.retrieval.evaluation import evaluation_table, expected_queries
from dagster_project.core.retrieval.headline import (
    FINETUNED,
    YES_NO_BASE,
    YES_NO_LORA,
    facets_of_test_split,
    finetuned_runs,
    images_sent,
    paired_mrr,
    yes_no_runs,
)
from dagster_project.core.retrieval.yes_no import Score
from dagster_project.core.retrieval.metrics import ranking_metrics
from dagster_project.core.retrieval.rankers import TEXT_ONLY
from dagster_project.core.shared.tables import markdown_table
from dagster_project.defs.headlines.common import GROUP, SERVABLE
from dagster_project.defs.headlines.published import CLARIMM, CLARIMM_SOURCE, verdict
from dagster_project.lib.assets import group_asset, upstream
from dagster_project.llm.trained import ServedModel, TrainedModelMissing, served_model
from dagster_project.training.lm_training import device_and_dtype

asset = group_asset(GROUP)
# ranker -> the one it is tested against: each trained re-ranker vs its untrained base, the generative one vs BM25
REFERENCES = {FINETUNED: "dense_rerank", "generative_rerank": "bm25", YES_NO_LORA: YES_NO_BASE}
TRAINED_RERANKERS = ("reranker_finetuned", "reranker_generative")  # training.models entries this table serves
INPUTS = ("retrieval/runs", "retrieval/qrels", "retrieval/inferred_queries", "retrieval/reranker_training",
          "retrieval/documents")
NO_IMAGES = ("no image reached any model: every row is text-only (the QA data carries no images, or "
             "retrieval.reranker_vision is off / the reranker backend takes no images)")


def encoder(folder: str) -> Callable[[list[str]], np.ndarray]:
    """Unit vectors from the sentence-transformers model in `folder` (the fine-tuned MiniLM)."""
    from dagster_project.llm.embedder import encode

    return lambda texts: encode(texts, folder)


def scorer(served: ServedModel, params: Params) -> Score:
    """Yes/no relevance scores from `served` on training.device in training's dtype (llm/yes_no.py)."""
    from dagster_project.llm.yes_no import yes_no_scorer

    device, dtype = device_and_dtype(params.training)
    return yes_no_scorer(served, device, dtype, params.training.yes_no_reranker.batch_size)


def _trained(table: pl.DataFrame, name: str) -> tuple[str | None, str | None]:
    """(folder, why not served) of training/<name>."""
    if table.is_empty():
        return None, f"training/{name} has no row"
    r = table.row(0, named=True)
    if r["status"] not in SERVABLE or not r["folder"]:
        return None, f"training/{name}: {r['status']} ({r['reason'] or 'no folder'})"
    return r["folder"], None


def _yes_no(params: Params, bm25: pl.DataFrame, texts: dict[str, str], conversations: dict[str, str],
            table: pl.DataFrame) -> tuple[pl.DataFrame | None, str | None, dict[str, Any]]:
    """(run rows of the LoRA yes/no re-ranker and of its base scored the same way, why not, timings): neither when
    the trained model cannot be served (the base is not scored for nothing)."""
    folder, why = _trained(table, "reranker_generative")
    if not folder:
        return None, why, {}
    try:
        served = served_model("training/reranker_generative")
    except TrainedModelMissing as err:
        return None, str(err), {}
    base = ServedModel(weights=served.weights) if served.adapters else ServedModel(weights=params.training.base_model)
    cfg, y = params.retrieval, params.training.yes_no_reranker
    frames, seconds = [], {}
    for ranker, model, label in ((YES_NO_BASE, base, base.weights),
                                 (YES_NO_LORA, served, "training/reranker_generative")):
        t0 = time.monotonic()
        frames.append(yes_no_runs(bm25, scorer(model, params), texts, conversations, cfg.rerank_depth, y.doc_chars,
                                  ranker, label))
        seconds[f"{ranker}_s"] = round(time.monotonic() - t0, 1)
    return pl.concat(frames), None, seconds


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


NO_TEST_QUERIES = ("no sampled session is on a test-split facet, so the table holds the published rows only: "
                   "raise retrieval.per_length (or change retrieval.seed, which also draws the facet split)")


def retrieval_headline_asset(params: Params) -> dg.AssetsDefinition:
    """retrieval_headline after the training assets of the re-rankers training.models builds."""
    models = [m for m in TRAINED_RERANKERS if m in params.training.models]

    @asset(name="retrieval_headline", description=headline_table.__doc__,
           ins=upstream(*INPUTS, *(f"training/{m}" for m in models)))
    def retrieval_headline(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params], runs: pl.DataFrame,
                           qrels: pl.DataFrame, inferred_queries: pl.DataFrame, reranker_training: pl.DataFrame,
                           documents: pl.DataFrame, **trained: pl.DataFrame) -> pl.DataFrame:
        out, meta = headline_table(params, runs, qrels, inferred_queries, reranker_training, documents, trained)
        if not meta["test_queries"]:
            context.log.warning(NO_TEST_QUERIES)
        context.add_output_metadata(meta)
        return out

    return retrieval_headline


def headline_table(params: Params, runs: pl.DataFrame, qrels: pl.DataFrame, inferred_queries: pl.DataFrame,
                   reranker_training: pl.DataFrame, documents: pl.DataFrame,
                   trained: dict[str, pl.DataFrame]) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Per ranker x input (multi/single turn) x modality on the test-split queries only: n_queries (the same for
    every ranker), MRR, P@k, nDCG@k, the depth every re-ranker re-ordered, how many queries' images reached the
    model (a row is multimodal only then), each trained re-ranker vs its base and generative vs BM25 paired tests
    with a verdict; the paper's Table 3/4 rows beside (system `published`). `trained`: the training tables of
    training/reranker_finetuned and training/reranker_generative that training.models builds. Returns (table,
    the asset's metadata)."""
    cfg = params.retrieval
    facets = facets_of_test_split(reranker_training)
    test_q = inferred_queries.filter(pl.col("facet_id").is_in(list(facets)))
    qids = test_q["query_id"].to_list()
    test_runs = runs.filter(pl.col("query_id").is_in(qids))
    folder, why = (_trained(trained["reranker_finetuned"], "reranker_finetuned") if "reranker_finetuned" in trained
                   else (None, "training.models has no reranker_finetuned"))
    rankers = list(cfg.rankers)
    texts = {d: document_text(t, x) for d, t, x in documents.select("doc_id", "title", "text").iter_rows()}
    bm25 = test_runs.filter(pl.col("ranker") == "bm25")
    if folder and "bm25" in rankers:
        ft = finetuned_runs(bm25, encoder(folder), texts, cfg.rerank_depth, folder)
        test_runs, rankers = pl.concat([test_runs, ft], how="diagonal_relaxed"), [*rankers, FINETUNED]
    elif folder:
        why = "retrieval.rankers has no bm25: the fine-tuned re-ranker re-orders the BM25 first stage"
    yes_no, why_yes_no, seconds = None, "training.models has no reranker_generative", {}
    if "reranker_generative" in trained and "bm25" not in rankers:
        why_yes_no = "retrieval.rankers has no bm25: the yes/no re-ranker re-orders the BM25 first stage"
    elif "reranker_generative" in trained:
        conversations = dict(test_q.select("query_id", "conversation").iter_rows())
        yes_no, why_yes_no, seconds = _yes_no(params, bm25, texts, conversations, trained["reranker_generative"])
    if yes_no is not None:
        test_runs = pl.concat([test_runs, yes_no], how="diagonal_relaxed")
        rankers += [YES_NO_BASE, YES_NO_LORA]
    expected = expected_queries(test_q, test_runs, rankers)
    table, per_query = evaluation_table(test_runs, expected, qrels, cfg.ks, ranking_metrics, cfg.failed_rerank,
                                        cfg.rerank_depth)
    sent = images_sent(test_runs, qids)
    source = " + ".join(["retrieval/runs", *(f"training/{m}" for m in sorted(trained))])
    table = (table.filter(pl.col("breakdown") != "by_turns").drop("n_turns")
             .with_columns(split=pl.lit("test"), rerank_depth=pl.lit(cfg.rerank_depth),
                           images_sent=pl.format("{}/{}/{}", "ranker", "input", "modality")
                           .replace_strict(sent, default=0, return_dtype=pl.Int64),
                           system=pl.lit("ours"), source=pl.lit(source)))
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
    meta = {
        "test_queries": len(qids), "test_facets": len(facets), "rerank_depth": cfg.rerank_depth,
        **({"note": NO_TEST_QUERIES} if not qids else {}),
        "images": NO_IMAGES if not sum(sent.values()) else dg.MetadataValue.json(sent),
        "finetuned": folder or why,
        "yes_no": "training/reranker_generative and its base" if yes_no is not None else why_yes_no, **seconds,
        "table": dg.MetadataValue.md(markdown_table(overall.select(
            "input", "ranker", "modality", "n_queries", "n_excluded", "mrr", *[f"p_at_{k}" for k in cfg.ks],
            *[f"ndcg_at_{k}" for k in cfg.ks], "images_sent"))),
        "comparisons": dg.MetadataValue.md(markdown_table(tests, plain=["mrr_diff", "p_value"])),
        "published_source": CLARIMM_SOURCE,
        **{f"verdict/{r['ranker']}_{r['input']}": r["verdict"] for r in tests.iter_rows(named=True)}}
    return out, meta
