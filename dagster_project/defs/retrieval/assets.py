"""Group `retrieval`: single-turn clarification QA -> multi-turn sessions -> inferred queries -> BM25 + re-rankers
-> MRR / P@k / nDCG (seed: ClariMM + Mario). Thin wiring; the methods live in core/retrieval/."""

from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import polars as pl

from dagster_project.config import Params
from dagster_project.core.retrieval.documents import document_text, keyword_ids
from dagster_project.core.retrieval.evaluation import (
    evaluation_table,
    expected_queries,
    relevant_by_facet,
)
from dagster_project.core.retrieval.inference import infer_queries
from dagster_project.core.retrieval.metrics import ranking_metrics
from dagster_project.core.retrieval.rankers import rank_queries
from dagster_project.core.retrieval.refinement import length_summary, refine
from dagster_project.core.retrieval.sessions import facet_pools, sample_sessions
from dagster_project.core.retrieval.training import (
    SPLITS,
    training_examples,
    trl_records,
)
from dagster_project.core.shared.tables import markdown_table
from dagster_project.io.formats.retrieval import (
    import_clarification_qa,
    import_documents,
    import_qrels,
)
from dagster_project.io.formats.trec import to_trec_qrels, to_trec_run
from dagster_project.io.writers import write_jsonl_atomic
from dagster_project.lib.assets import group_asset, status_counts, upstream
from dagster_project.lib.resources import EmbedderResource, LLMResource
from dagster_project.lib.warehouse import ASSETS_DIR
from dagster_project.llm.task import Status

GROUP = "retrieval"
asset = group_asset(GROUP)


def _out(name: str, description: str) -> dg.AssetOut:
    return dg.AssetOut(key=[GROUP, name], group_name=GROUP, kinds={"polars"}, description=description)


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), 4)


def _trec_folder() -> Path:
    folder = Path(ASSETS_DIR) / GROUP / "trec"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


# --------------------------------------------------------------------------- imports

@dg.multi_asset(name="retrieval__import_clarification_qa", group_name=GROUP, outs={
    "clarification_qa": _out("clarification_qa", "Validated single-turn clarification QA, one row per facet x "
                                                 "question (ClariQ / Melon shape), with image references."),
    "clarification_qa_rejected": _out("clarification_qa_rejected", "QA records quarantined on import, with reason."),
})
def import_clarification_qa_asset(context: dg.AssetExecutionContext,
                                  params: dg.ResourceParam[Params]) -> Iterator[dg.Output]:
    """The QA file read record by record: kept pairs and the quarantine."""
    cfg = params.retrieval
    imp = import_clarification_qa(cfg.qa_path)
    meta = {**imp.summary(), "path": cfg.qa_path, "topics": imp.kept["topic_id"].n_unique(),
            "facets": imp.kept["facet_id"].n_unique(), "questions": imp.kept["question_id"].n_unique(),
            "with_images": int((imp.kept["images"].list.len() > 0).sum())}
    yield dg.Output(imp.kept.with_columns(input_records=pl.lit(imp.n_records)), "clarification_qa", metadata=meta)
    yield dg.Output(imp.rejected, "clarification_qa_rejected", metadata={"rows": imp.rejected.height})


@dg.multi_asset(name="retrieval__import_documents", group_name=GROUP, outs={
    "documents": _out("documents", "Document collection with each document's YAKE keyword ID (Mario's doc IDs)."),
    "documents_rejected": _out("documents_rejected", "Document records quarantined on import, with reason."),
})
def import_documents_asset(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params]) -> Iterator[dg.Output]:
    """The documents read record by record, each with its keyword ID; and the quarantine."""
    cfg = params.retrieval
    imp = import_documents(cfg.documents_path)
    docs = imp.kept
    kids = keyword_ids([document_text(t, x) for t, x in docs.select("title", "text").iter_rows()],
                       cfg.keywords_per_doc, cfg.keyword_ngram)
    docs = docs.with_columns(keyword_id=pl.Series(kids, dtype=pl.Utf8), input_records=pl.lit(imp.n_records))
    yield dg.Output(docs, "documents", metadata={**imp.summary(), "path": cfg.documents_path})
    yield dg.Output(imp.rejected, "documents_rejected", metadata={"rows": imp.rejected.height})


@dg.multi_asset(name="retrieval__import_qrels", group_name=GROUP, outs={
    "qrels": _out("qrels", "TREC relevance judgements per facet (qid = facet id)."),
    "qrels_rejected": _out("qrels_rejected", "Qrels lines quarantined: malformed, unknown facet or document."),
}, ins=upstream("retrieval/clarification_qa", "retrieval/documents"))
def import_qrels_asset(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                       clarification_qa: pl.DataFrame, documents: pl.DataFrame) -> Iterator[dg.Output]:
    """The qrels lines checked against the imported facets and documents; and the quarantine."""
    cfg = params.retrieval
    imp = import_qrels(cfg.qrels_path, clarification_qa["facet_id"].unique(), documents["doc_id"])
    judged = relevant_by_facet(imp.kept)
    facets = set(clarification_qa["facet_id"])
    meta = {**imp.summary(), "path": cfg.qrels_path, "facets_with_relevant_docs": len(judged),
            "facets_without_relevant_docs": len(facets - set(judged))}
    yield dg.Output(imp.kept.with_columns(input_records=pl.lit(imp.n_records)), "qrels", metadata=meta)
    yield dg.Output(imp.rejected, "qrels_rejected", metadata={"rows": imp.rejected.height})


# --------------------------------------------------------------------------- sessions (§3.1 + Appendix A)

@asset(ins=upstream("retrieval/clarification_qa"))
def sessions(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params], llm: dg.ResourceParam[LLMResource],
             clarification_qa: pl.DataFrame) -> pl.DataFrame:
    """Multi-turn sessions: streamed combinations of a facet's QA pairs, reservoir-sampled per length, refined.

    Every sampled session is a row: kept=False rows say why (similar QA pairs, facet revealed at turn 1,
    duplicate after a cut). Turns keep raw and rewritten answers and their image references.
    """
    cfg = params.retrieval
    qa = {r["qa_id"]: r for r in clarification_qa.iter_rows(named=True)}
    candidates = sample_sessions(facet_pools(clarification_qa), cfg.turn_lengths, cfg.per_length, cfg.seed)
    chat = llm.session(context)
    out = refine(chat, candidates, qa, cfg, params.llm)
    out = out.insert_column(out.columns.index("model"),  # source, model, prompt_version: the table's last columns
                            pl.repeat(f"{GROUP}.clarification_qa", out.height, eager=True).alias("source"))
    summary = length_summary(out, cfg.turn_lengths)
    context.add_output_metadata({
        **chat.usage(), "sampled": out.height, "kept": int(out["kept"].sum()), **status_counts(out),
        "per_length": dg.MetadataValue.md(markdown_table(summary)),
        "shortfall": int(summary["shortfall"].sum()),
        "rejected_reasons": dg.MetadataValue.json(
            {r: n for r, n in out.filter(~pl.col("kept")).group_by("reject_reason").len().iter_rows()}),
    })
    return out


# --------------------------------------------------------------------------- inferred queries (Appendix D)

@asset(ins=upstream("retrieval/sessions"))
def inferred_queries(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                     llm: dg.ResourceParam[LLMResource], sessions: pl.DataFrame) -> pl.DataFrame:
    """The generator condenses each kept session (multi_turn) and its first turn (single_turn) into a query."""
    chat = llm.session(context)
    out = infer_queries(chat, sessions, params.retrieval.inputs, params.llm.role("generator").seed)
    out = out.with_columns(source=pl.lit(f"{GROUP}.sessions"))
    context.add_output_metadata({
        **chat.usage(), "queries": out.height, "parse_errors": int((out["status"] == Status.PARSE_ERROR.value).sum()),
        "preview": dg.MetadataValue.md(markdown_table(out.select("query_id", "inferred_query").head(10)))})
    return out


# --------------------------------------------------------------------------- runs (§4.3)

@asset(ins=upstream("retrieval/inferred_queries", "retrieval/documents"))
def runs(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params], llm: dg.ResourceParam[LLMResource],
         embedder: EmbedderResource, inferred_queries: pl.DataFrame, documents: pl.DataFrame) -> pl.DataFrame:
    """Ranked lists per query and ranker (bm25, bm25_history, dense_rerank, generative_rerank), TREC-exportable.

    generative_rerank runs text_only unless retrieval.reranker_vision is on AND the reranker role's backend can
    take images (openai / vllm); then sessions with images get a second, multimodal run. dense_rerank rows name
    the embedder resource's model: the one that produced the vectors.
    """
    chat = llm.session(context)
    out, meta = rank_queries(chat, embedder.encode, embedder.model, inferred_queries, documents, params.retrieval,
                             params.llm.role("reranker"))
    out = out.with_columns(source=pl.lit(f"{GROUP}.inferred_queries"))
    folder = _trec_folder()
    for (run_id,), g in out.group_by(["run_id"], maintain_order=True):
        (folder / f"{run_id.replace('/', '.')}.run").write_text(to_trec_run(g))
    per_run = out.group_by("run_id").agg(pl.col("query_id").n_unique().alias("queries"), pl.len().alias("rows"),
                                         (pl.col("status") != Status.OK.value).sum().alias("not_ok_rows")).sort("run_id")
    context.add_output_metadata({**chat.usage(), **meta, "rows": out.height, "trec_folder": str(folder),
                                 **status_counts(out), "runs": dg.MetadataValue.md(markdown_table(per_run))})
    return out


# --------------------------------------------------------------------------- metrics (§5, §6.1)

@asset(ins=upstream("retrieval/runs", "retrieval/qrels", "retrieval/inferred_queries"))
def retrieval_metrics(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params], runs: pl.DataFrame,
                      qrels: pl.DataFrame, inferred_queries: pl.DataFrame) -> pl.DataFrame:
    """MRR, P@k, nDCG@k (trec_eval via pytrec_eval) per ranker x input (multi/single turn) x modality, overall
    and by number of turns; every ranker on the same queries (n_queries, n_fallback per row, `failed_rerank`), and
    the share of generated ranks of the generative re-ranker."""
    cfg = params.retrieval
    expected = expected_queries(inferred_queries, runs, cfg.rankers)
    table, per_query = evaluation_table(runs, expected, qrels, cfg.ks, ranking_metrics, cfg.failed_rerank,
                                        cfg.rerank_depth)
    table = table.with_columns(source=pl.lit(f"{GROUP}.runs"))
    (_trec_folder() / "qrels.txt").write_text(to_trec_qrels(qrels, inferred_queries.select("query_id", "facet_id")))
    overall = table.filter(pl.col("breakdown") == "overall").drop("breakdown", "n_turns", "source")
    gen = overall.filter(pl.col("ranker") == "generative_rerank")
    context.add_output_metadata({
        "evaluated_queries": per_query.height, "failed_rerank": cfg.failed_rerank,
        "fallback_queries": int(overall["n_fallback"].sum() or 0),
        "generated_rank_share": _round(gen["generated_share"].mean()) if gen.height else None,
        "excluded_queries": int(table.filter(pl.col("breakdown") == "overall")["n_excluded"].sum() or 0),
        "overall": dg.MetadataValue.md(markdown_table(overall)),
        "with_images": dg.MetadataValue.md(markdown_table(
            table.filter(pl.col("breakdown") == "with_images").drop("breakdown", "n_turns", "source"))),
    })
    return table


# --------------------------------------------------------------------------- re-ranker training data (§4.3.2, §5)

@asset(ins=upstream("retrieval/inferred_queries", "retrieval/documents", "retrieval/qrels",
                    "retrieval/clarification_qa"))
def reranker_training(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                      inferred_queries: pl.DataFrame, documents: pl.DataFrame, qrels: pl.DataFrame,
                      clarification_qa: pl.DataFrame) -> pl.DataFrame:
    """Generative re-ranker training data: per session and relevant document, the first decoding step exactly as
    inference renders it (BM25 negatives as the other candidates) and the positive's keyword ID as completion;
    facets split train/val/test (`facet_split`, paper 80/10/10), test topics marked seen/unseen. Each split's kept
    rows go to assets/retrieval/exports/reranker_<split>.jsonl (TRL prompt-completion); an empty split writes no
    file and says so in the metadata."""
    cfg = params.retrieval
    out = training_examples(inferred_queries, documents, relevant_by_facet(qrels),
                            clarification_qa["facet_id"].unique().to_list(), cfg)
    folder = Path(ASSETS_DIR) / GROUP / "exports"
    meta: dict = {"rows": out.height, "kept": int(out["kept"].sum()),
                  "rejected": dg.MetadataValue.json(dict(
                      out.filter(~pl.col("kept")).group_by("reject_reason").len().iter_rows()))}
    for split in SPLITS:
        records = trl_records(out, split)
        path = folder / f"reranker_{split}.jsonl"
        if records:
            meta[f"{split}_examples"] = write_jsonl_atomic(records, path)
        else:
            path.unlink(missing_ok=True)
            meta[f"{split}_skipped"] = "no examples: file not written"
            context.log.warning(f"reranker_training: no {split} examples, {path} not written")
        meta[f"{split}_facets"] = out.filter(pl.col("split") == split)["facet_id"].n_unique()
    meta["unseen_test_topics"] = out.filter((pl.col("split") == "test") & ~pl.col("topic_seen"))["topic_id"].n_unique()
    context.add_output_metadata(meta)
    return out.with_columns(source=pl.lit(f"{GROUP}.inferred_queries"))
