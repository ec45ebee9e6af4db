"""Group `retrieval`: single-turn clarification QA -> multi-turn sessions -> inferred queries -> BM25 + re-rankers
-> MRR / P@k / nDCG (seed: ClariMM + Mario). Thin wiring; the methods live in core/retrieval.py."""

from pathlib import Path

import dagster as dg
import polars as pl

from dagster_project.core import retrieval as R
from dagster_project.llm.chat import ChatRequest, ChatResult
from dagster_project.core.retrieval.metrics import ranking_metrics
from dagster_project.core.shared.tables import markdown_table
from dagster_project.lib.embedder import EmbedderResource
from dagster_project.llm.client import LLMResource
from dagster_project.resources.params import ParamsResource
from dagster_project.lib.warehouse import ASSETS_DIR

GROUP = "retrieval"


def _out(name: str, description: str) -> dg.AssetOut:
    return dg.AssetOut(key=[GROUP, name], group_name=GROUP, kinds={"polars"}, description=description)


def _chat_unique(llm: LLMResource, role: str, requests: list[ChatRequest], context) -> list[ChatResult]:
    """One call per distinct request (sessions share QA pairs and first turns); results mapped back in order."""
    keys = [R.request_key(r) for r in requests]
    order = R.unique_in_order(keys)
    first = {k: i for i, k in reversed(list(enumerate(keys)))}
    results = llm.chat(role, [requests[first[k]] for k in order], context) if order else []
    by_key = dict(zip(order, results))
    return [by_key[k] for k in keys]


# --------------------------------------------------------------------------- imports

@dg.multi_asset(name="retrieval__import_clarification_qa", group_name=GROUP, outs={
    "clarification_qa": _out("clarification_qa", "Validated single-turn clarification QA, one row per facet x "
                                                 "question (ClariQ / Melon shape), with image references."),
    "clarification_qa_rejected": _out("clarification_qa_rejected", "QA records quarantined on import, with reason."),
})
def import_clarification_qa(context: dg.AssetExecutionContext, params: ParamsResource):
    cfg = params.load().retrieval
    imp = R.import_clarification_qa(cfg.qa_path)
    meta = {**imp.summary(), "path": cfg.qa_path, "topics": imp.kept["topic_id"].n_unique(),
            "facets": imp.kept["facet_id"].n_unique(), "questions": imp.kept["question_id"].n_unique(),
            "with_images": int((imp.kept["images"].list.len() > 0).sum())}
    yield dg.Output(imp.kept.with_columns(input_records=pl.lit(imp.n_records)), "clarification_qa", metadata=meta)
    yield dg.Output(imp.rejected, "clarification_qa_rejected", metadata={"rows": imp.rejected.height})


@dg.multi_asset(name="retrieval__import_documents", group_name=GROUP, outs={
    "documents": _out("documents", "Document collection with each document's YAKE keyword ID (Mario's doc IDs)."),
    "documents_rejected": _out("documents_rejected", "Document records quarantined on import, with reason."),
})
def import_documents(context: dg.AssetExecutionContext, params: ParamsResource):
    cfg = params.load().retrieval
    imp = R.import_documents(cfg.documents_path)
    docs = imp.kept
    kids = R.keyword_ids([R.document_text(t, x) for t, x in docs.select("title", "text").iter_rows()],
                         cfg.keywords_per_doc, cfg.keyword_ngram)
    docs = docs.with_columns(keyword_id=pl.Series(kids, dtype=pl.Utf8), input_records=pl.lit(imp.n_records))
    yield dg.Output(docs, "documents", metadata={**imp.summary(), "path": cfg.documents_path})
    yield dg.Output(imp.rejected, "documents_rejected", metadata={"rows": imp.rejected.height})


@dg.multi_asset(name="retrieval__import_qrels", group_name=GROUP, outs={
    "qrels": _out("qrels", "TREC relevance judgements per facet (qid = facet id)."),
    "qrels_rejected": _out("qrels_rejected", "Qrels lines quarantined: malformed, unknown facet or document."),
}, ins={"clarification_qa": dg.AssetIn(key=[GROUP, "clarification_qa"]),
        "documents": dg.AssetIn(key=[GROUP, "documents"])})
def import_qrels(context: dg.AssetExecutionContext, params: ParamsResource, clarification_qa: pl.DataFrame,
                 documents: pl.DataFrame):
    cfg = params.load().retrieval
    imp = R.import_qrels(cfg.qrels_path, clarification_qa["facet_id"].unique(), documents["doc_id"])
    judged = R.relevant_by_facet(imp.kept)
    facets = set(clarification_qa["facet_id"])
    meta = {**imp.summary(), "path": cfg.qrels_path, "facets_with_relevant_docs": len(judged),
            "facets_without_relevant_docs": len(facets - set(judged))}
    yield dg.Output(imp.kept.with_columns(input_records=pl.lit(imp.n_records)), "qrels", metadata=meta)
    yield dg.Output(imp.rejected, "qrels_rejected", metadata={"rows": imp.rejected.height})


# --------------------------------------------------------------------------- sessions (§3.1 + Appendix A)

@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"},
          ins={"clarification_qa": dg.AssetIn(key=[GROUP, "clarification_qa"])})
def sessions(context: dg.AssetExecutionContext, params: ParamsResource, llm: LLMResource,
             clarification_qa: pl.DataFrame) -> pl.DataFrame:
    """Multi-turn sessions: streamed combinations of a facet's QA pairs, reservoir-sampled per length, refined.

    Every sampled session is a row: kept=False rows say why (similar QA pairs, facet revealed at turn 1,
    duplicate after a cut). Turns keep raw and rewritten answers and their image references.
    """
    p = params.load()
    cfg = p.retrieval
    qa = {r["qa_id"]: r for r in clarification_qa.iter_rows(named=True)}
    pools = R.facet_pools(clarification_qa)
    cands = R.sample_sessions(pools, cfg.turn_lengths, cfg.per_length, cfg.seed)
    meta: dict = {}

    similar: dict = {}
    if cfg.similar_check:
        pairs = R.unique_in_order(pr for ids in cands["qa_ids"] for pr in R.session_pairs(list(ids)))
        res = _chat_unique(llm, "judge", R.similar_pair_requests(pairs, qa, p.llm.role("judge").seed), context)
        similar = {pr: R.parse_choice(x, "information", R.SIMILAR_CHOICES) for pr, x in zip(pairs, res)}
        meta |= {f"similar_{k}": v for k, v in llm.usage("judge", res).items()}
    revealed: dict = {}
    if cfg.reveal_cut:
        ids = R.unique_in_order(i for row in cands["qa_ids"] for i in row)
        res = _chat_unique(llm, "judge", R.revealed_requests(ids, qa, p.llm.role("judge").seed), context)
        revealed = {i: R.parse_choice(x, "intention", R.REVEALED_CHOICES) for i, x in zip(ids, res)}
        meta |= {f"revealed_{k}": v for k, v in llm.usage("judge", res).items()}
    rewrites: dict = {}
    if cfg.rewrite_answers:
        planned = R.refine_sessions(cands, qa, similar, revealed, {})  # which turns survive, at which stage
        items = R.unique_in_order((t["qa_id"], t_stage) for row in planned.filter(pl.col("kept")).iter_rows(named=True)
                                  for t in row["turns"] for t_stage in [R.rewrite_stage(t["turn"], row["n_turns"])])
        res = _chat_unique(llm, "user_simulator", R.rewrite_requests(items, qa, cfg.refine_temperature,
                                                                     p.llm.role("user_simulator").seed), context)
        rewrites = {it: R.parse_text_field(x, "answer") for it, x in zip(items, res)}
        meta |= {f"rewrite_{k}": v for k, v in llm.usage("user_simulator", res).items()}

    out = R.refine_sessions(cands, qa, similar, revealed, rewrites)
    versions = sorted({R.load_prompt(n).version for n, on in (
        ("retrieval_similar_pairs", cfg.similar_check), ("retrieval_facet_revealed", cfg.reveal_cut),
        *((n, cfg.rewrite_answers) for n in R.REWRITE_PROMPTS.values())) if on})
    models = sorted({p.llm.role(r).model for r, on in (("judge", cfg.similar_check or cfg.reveal_cut),
                                                       ("user_simulator", cfg.rewrite_answers)) if on})
    out = out.with_columns(source=pl.lit(f"{GROUP}.clarification_qa"), model=pl.lit(", ".join(models) or None, pl.Utf8),
                           prompt_version=pl.lit(", ".join(versions) or None, pl.Utf8))
    summary = R.length_summary(out, cfg.turn_lengths)
    context.add_output_metadata(meta | {
        "sampled": out.height, "kept": int(out["kept"].sum()),
        "per_length": dg.MetadataValue.md(markdown_table(summary)),
        "shortfall": int(summary["shortfall"].sum()),
        "rejected_reasons": dg.MetadataValue.json(
            {r: n for r, n in out.filter(~pl.col("kept")).group_by("reject_reason").len().iter_rows()}),
    })
    return out


# --------------------------------------------------------------------------- inferred queries (Appendix D)

@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"}, ins={"sessions": dg.AssetIn(key=[GROUP, "sessions"])})
def inferred_queries(context: dg.AssetExecutionContext, params: ParamsResource, llm: LLMResource,
                     sessions: pl.DataFrame) -> pl.DataFrame:
    """The generator condenses each kept session (multi_turn) and its first turn (single_turn) into a query."""
    p = params.load()
    rows = R.inference_inputs(sessions, p.retrieval.inputs)
    reqs = R.inference_requests(rows["conversation"].to_list(), p.llm.role("generator").seed)
    res = _chat_unique(llm, "generator", reqs, context)
    parsed = [R.parse_text_field(x, "query") for x in res]
    out = rows.with_columns(
        inferred_query=pl.Series([v.value for v in parsed], dtype=pl.Utf8),
        status=pl.Series([v.status for v in parsed], dtype=pl.Utf8),
        error=pl.Series([v.error for v in parsed], dtype=pl.Utf8),
        raw_output=pl.Series([v.raw for v in parsed], dtype=pl.Utf8),
        model=pl.Series([v.model or p.llm.role("generator").model for v in parsed], dtype=pl.Utf8),
        prompt_version=pl.lit(reqs[0].prompt_version if reqs else None, pl.Utf8),
        source=pl.lit(f"{GROUP}.sessions"),
    )
    context.add_output_metadata(llm.usage("generator", res) | {
        "queries": out.height, "parse_errors": int((out["status"] == "parse_error").sum()),
        "preview": dg.MetadataValue.md(markdown_table(out.select("query_id", "inferred_query").head(10)))})
    return out


# --------------------------------------------------------------------------- runs (§4.3)

@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"},
          ins={"inferred_queries": dg.AssetIn(key=[GROUP, "inferred_queries"]),
               "documents": dg.AssetIn(key=[GROUP, "documents"])})
def runs(context: dg.AssetExecutionContext, params: ParamsResource, llm: LLMResource, embedder: EmbedderResource,
         inferred_queries: pl.DataFrame, documents: pl.DataFrame) -> pl.DataFrame:
    """Ranked lists per query and ranker (bm25, bm25_history, dense_rerank, generative_rerank), TREC-exportable.

    generative_rerank runs text_only unless retrieval.reranker_vision is on AND the reranker role's backend can
    take images (openai / vllm); then sessions with images get a second, multimodal run.
    """
    p = params.load()
    cfg = p.retrieval
    reranker = p.llm.role("reranker")
    vision = cfg.reranker_vision and reranker.backend != "llamacpp"
    doc_texts = {d: R.document_text(t, x) for d, t, x in documents.select("doc_id", "title", "text").iter_rows()}
    kid = dict(documents.select("doc_id", "keyword_id").iter_rows())
    index = R.BM25Index(list(doc_texts), list(doc_texts.values()))
    q = inferred_queries
    fallback = [iq if st == "ok" and iq else ir
                for iq, ir, st in q.select("inferred_query", "initial_request", "status").iter_rows()]
    q_status = ["ok" if st == "ok" else "input_error" for st in q["status"]]
    q_error = [None if st == "ok" else f"inferred query unavailable ({st}); searched the initial request instead"
               for st in q["status"]]
    first = index.search(fallback, cfg.first_stage_k)
    rows: list[dict] = []
    meta: dict = {"bm25_queries": q.height, "vision": vision}
    if cfg.reranker_vision and not vision:
        meta["vision_note"] = "reranker_vision is on but the reranker backend is llamacpp (no image input): text_only"

    def base(i: int, ranker: str, modality: str, text: str, status: str, error: str | None, model=None, pv=None):
        r = q.row(i, named=True)
        return {"query_id": r["query_id"], "session_id": r["session_id"], "input": r["input"],
                "facet_id": r["facet_id"], "n_turns": r["n_turns"], "ranker": ranker, "modality": modality,
                "run_id": f"{ranker}/{r['input']}/{modality}", "query_text": text, "status": status,
                "error": error, "model": model, "prompt_version": pv}

    if "bm25" in cfg.rankers:
        for i, hits in enumerate(first):
            rows += R.run_rows(base(i, "bm25", R.TEXT_ONLY, fallback[i], q_status[i], q_error[i]),
                               [(d, s, "first_stage") for d, s in hits])
    if "bm25_history" in cfg.rankers:
        for i, hits in enumerate(index.search(q["conversation"].to_list(), cfg.first_stage_k)):
            rows += R.run_rows(base(i, "bm25_history", R.TEXT_ONLY, q["conversation"][i], "ok", None),
                               [(d, s, "first_stage") for d, s in hits])
    if "dense_rerank" in cfg.rankers and q.height:
        cand = [[d for d, _ in hits] for hits in first]
        need = R.unique_in_order(d for c in cand for d in c)
        vecs = embedder.encode([doc_texts[d] for d in need])
        dense = R.dense_rerank(embedder.encode(fallback), cand, dict(zip(need, vecs)))
        model = p.embedder.model
        for i, ranked in enumerate(dense):
            rows += R.run_rows(base(i, "dense_rerank", R.TEXT_ONLY, fallback[i], q_status[i], q_error[i], model),
                               [(d, s, "dense") for d, s in ranked])
        meta["dense_docs_embedded"] = len(need)
    if "generative_rerank" in cfg.rankers and q.height:
        base_dir = Path(cfg.qa_path).parent
        image_refs = [list(x or []) for x in q["images"].to_list()]
        conversations = q["conversation"].to_list()
        variants = [(R.TEXT_ONLY, list(range(q.height)))]
        if vision:
            variants.append((R.MULTIMODAL, [i for i in range(q.height) if image_refs[i]]))
        calls: list[ChatResult] = []

        def chat(reqs):
            res = llm.chat("reranker", reqs, context)
            calls.extend(res)
            return res

        for modality, idx in variants:
            tasks, prep_err = [], {}
            for i in idx:
                head = [d for d, _ in first[i]][:cfg.rerank_depth]
                images = None
                if modality == R.MULTIMODAL:
                    try:
                        images = [R.image_part(ref, base_dir) for ref in image_refs[i]]
                    except (OSError, ValueError) as err:
                        prep_err[i] = str(err)
                tasks.append(R.GenerativeTask(fallback[i], conversations[i],
                                              [(kid[d], R.snippet(doc_texts[d], cfg.snippet_chars)) for d in head],
                                              head, images))
            results = R.generative_rerank(tasks, cfg.generate_top, chat, reranker.seed)
            for i, t, g in zip(idx, tasks, results, strict=True):
                tail_scores = dict(first[i])
                status, error = (g.status, g.error) if q_status[i] == "ok" else (q_status[i], q_error[i])
                if i in prep_err:
                    status, error = "input_error", prep_err[i]
                ranked = [(d, None, "generated") for d in g.order[:g.generated]]
                ranked += [(d, tail_scores[d], "first_stage") for d in g.order[g.generated:]]
                ranked += [(d, s, "first_stage") for d, s in first[i][cfg.rerank_depth:]]
                rows += R.run_rows(base(i, "generative_rerank", modality, fallback[i], status, error,
                                        g.model or reranker.model, g.prompt_version), ranked, g.raw_outputs)
        meta |= {f"reranker_{k}": v for k, v in llm.usage("reranker", calls).items()}
    out = pl.DataFrame(rows, schema=R.RUN_SCHEMA).with_columns(source=pl.lit(f"{GROUP}.inferred_queries"))
    folder = Path(ASSETS_DIR) / GROUP / "trec"
    folder.mkdir(parents=True, exist_ok=True)
    for (run_id,), g in out.group_by(["run_id"], maintain_order=True):
        (folder / f"{run_id.replace('/', '.')}.run").write_text(R.to_trec_run(g))
    per_run = out.group_by("run_id").agg(pl.col("query_id").n_unique().alias("queries"), pl.len().alias("rows"),
                                         (pl.col("status") != "ok").sum().alias("not_ok_rows")).sort("run_id")
    context.add_output_metadata(meta | {"rows": out.height, "trec_folder": str(folder),
                                        "runs": dg.MetadataValue.md(markdown_table(per_run))})
    return out


# --------------------------------------------------------------------------- metrics (§5, §6.1)

@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"},
          ins={"runs": dg.AssetIn(key=[GROUP, "runs"]), "qrels": dg.AssetIn(key=[GROUP, "qrels"]),
               "inferred_queries": dg.AssetIn(key=[GROUP, "inferred_queries"])})
def retrieval_metrics(context: dg.AssetExecutionContext, params: ParamsResource, runs: pl.DataFrame,
                      qrels: pl.DataFrame, inferred_queries: pl.DataFrame) -> pl.DataFrame:
    """MRR, P@k, nDCG@k (trec_eval via pytrec_eval) per ranker x input (multi/single turn) x modality, overall and by number of turns."""
    cfg = params.load().retrieval
    expected = R.expected_queries(inferred_queries, runs, cfg.rankers)
    table, per_query = R.evaluation_table(runs, expected, qrels, cfg.ks, ranking_metrics)
    table = table.with_columns(source=pl.lit(f"{GROUP}.runs"))
    folder = Path(ASSETS_DIR) / GROUP / "trec"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "qrels.txt").write_text(R.to_trec_qrels(qrels, inferred_queries.select("query_id", "facet_id")))
    overall = table.filter(pl.col("breakdown") == "overall").drop("breakdown", "n_turns", "source")
    context.add_output_metadata({
        "evaluated_queries": per_query.height,
        "excluded_queries": int(table.filter(pl.col("breakdown") == "overall")["n_excluded"].sum() or 0),
        "overall": dg.MetadataValue.md(markdown_table(overall)),
        "with_images": dg.MetadataValue.md(markdown_table(
            table.filter(pl.col("breakdown") == "with_images").drop("breakdown", "n_turns", "source"))),
    })
    return table
