"""ClariMM §4.3 two-phase retrieval: BM25 (bm25s) first phase on the inferred query (the initial request when
inference failed), BM25 on the whole conversation (bm25_history), then a MiniLM bi-encoder re-rank or the
constrained generative re-rank (reranking.py) of the same BM25 top `rerank_depth` (the rest keeps the BM25 order),
so every re-ranker is compared at one depth. Every ranked list becomes TREC-exportable run rows."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from dagster_project.config import RetrievalConfig, RoleConfig
from dagster_project.core.retrieval.documents import document_text, snippet
from dagster_project.core.retrieval.reranking import GenerativeTask, generative_rerank
from dagster_project.io.images import image_part
from dagster_project.llm.task import Chat, Status

TEXT_ONLY, MULTIMODAL = "text_only", "multimodal"
Embed = Callable[[list[str]], np.ndarray]


class BM25Index:
    """bm25s over title + text, English stopwords; search returns (doc_id, score) with score > 0, best first."""

    def __init__(self, doc_ids: Sequence[str], texts: Sequence[str]):
        import bm25s

        self._bm25s = bm25s
        self.doc_ids = list(doc_ids)
        self.model = bm25s.BM25()
        self.model.index(bm25s.tokenize(list(texts), stopwords="en", show_progress=False), show_progress=False)

    def search(self, queries: Sequence[str], k: int) -> list[list[tuple[str, float]]]:
        if not queries:
            return []
        k = min(k, len(self.doc_ids))
        tokens = self._bm25s.tokenize(list(queries), stopwords="en", return_ids=False, show_progress=False)
        # a query whose words are all stopwords / unseen gets no hits (bm25s wants a non-empty token list)
        safe = [t if t else ["\x00"] for t in tokens]
        idx, scores = self.model.retrieve(safe, k=k, show_progress=False, n_threads=1)
        return [[(self.doc_ids[int(i)], float(s)) for i, s in zip(row_i, row_s) if s > 0]
                for row_i, row_s in zip(idx, scores)]


def dense_rerank(query_vecs: Any, candidates: Sequence[Sequence[str]], doc_vecs: dict[str, Any]) -> list[
        list[tuple[str, float]]]:
    """Re-order each query's first-phase candidates by cosine with the query (unit vectors: dot product).

    Ties keep the first-phase order (stable sort)."""
    import numpy as np

    out = []
    for q, cands in zip(query_vecs, candidates):
        if not cands:
            out.append([])
            continue
        sims = np.stack([doc_vecs[d] for d in cands]) @ np.asarray(q)
        order = sorted(range(len(cands)), key=lambda j: -float(sims[j]))
        out.append([(cands[j], float(sims[j])) for j in order])
    return out


RUN_SCHEMA = {
    "query_id": pl.Utf8, "session_id": pl.Utf8, "input": pl.Utf8, "facet_id": pl.Utf8, "n_turns": pl.Int64,
    "ranker": pl.Utf8, "modality": pl.Utf8, "run_id": pl.Utf8, "rank": pl.Int64, "doc_id": pl.Utf8,
    "score": pl.Float64, "stage": pl.Utf8, "query_text": pl.Utf8, "status": pl.Utf8, "error": pl.Utf8,
    "raw_output": pl.Utf8, "model": pl.Utf8, "prompt_version": pl.Utf8, "fallback": pl.Boolean,
}


def run_rows(base: dict[str, Any], ranked: Sequence[tuple[str, float | None, str]], raw: Sequence[str] = ()) -> list[dict]:
    """Rows of one ranked list: ranks contiguous from 1; raw[j] (the output of decoding step j+1) sits on rank j+1.
    """
    return [{**base, "rank": r, "doc_id": d, "score": s, "stage": stage,
             "raw_output": raw[r - 1] if r - 1 < len(raw) else None}
            for r, (d, s, stage) in enumerate(ranked, start=1)]


class _Queries:
    """The inferred-query table with what every ranker searches: the inferred query when it is usable, else
    the initial request (then the query's rows are input_error and say why)."""

    def __init__(self, q: pl.DataFrame):
        self.rows = q.to_dicts()
        self.text = [r["inferred_query"] if r["status"] == Status.OK and r["inferred_query"] else r["initial_request"]
                     for r in self.rows]
        self.status = [Status.OK if r["status"] == Status.OK else Status.INPUT_ERROR for r in self.rows]
        self.error = [None if r["status"] == Status.OK else
                      f"inferred query unavailable ({r['status']}); searched the initial request instead"
                      for r in self.rows]

    def base(self, i: int, ranker: str, modality: str, text: str, status: str, error: str | None,
             model: str | None = None, prompt_version: str | None = None) -> dict[str, Any]:
        r = self.rows[i]
        return {"query_id": r["query_id"], "session_id": r["session_id"], "input": r["input"],
                "facet_id": r["facet_id"], "n_turns": r["n_turns"], "ranker": ranker, "modality": modality,
                "run_id": f"{ranker}/{r['input']}/{modality}", "query_text": text, "status": str(status),
                "error": error, "model": model, "prompt_version": prompt_version,
                "fallback": str(status) != Status.OK.value}


def _generative_rows(chat: Chat, queries: _Queries, first: list[list[tuple[str, float]]], doc_texts: dict[str, str],
                     keyword_ids: dict[str, str], cfg: RetrievalConfig, reranker: RoleConfig,
                     vision: bool) -> list[dict]:
    """generative_rerank rows: text_only for every query, plus multimodal for queries with images (vision on)."""
    base_dir = Path(cfg.qa_path).parent
    image_refs = [list(r["images"] or []) for r in queries.rows]
    variants = [(TEXT_ONLY, list(range(len(queries.rows))))]
    if vision:
        variants.append((MULTIMODAL, [i for i, refs in enumerate(image_refs) if refs]))
    rows: list[dict] = []
    for modality, idx in variants:
        tasks, prep_err = [], {}
        for i in idx:
            head = [d for d, _ in first[i]][:cfg.rerank_depth]
            images = None
            if modality == MULTIMODAL:
                try:
                    images = [image_part(ref, base_dir) for ref in image_refs[i]]
                except (OSError, ValueError) as err:
                    prep_err[i] = str(err)
            tasks.append(GenerativeTask(queries.text[i], queries.rows[i]["conversation"],
                                        [(keyword_ids[d], snippet(doc_texts[d], cfg.snippet_chars)) for d in head],
                                        head, images))
        results = generative_rerank(tasks, chat, reranker.seed)
        for i, g in zip(idx, results, strict=True):
            tail_scores = dict(first[i])
            ok = queries.status[i] is Status.OK
            status, error = (g.status, g.error) if ok else (queries.status[i], queries.error[i])
            if i in prep_err:
                status, error = Status.INPUT_ERROR, prep_err[i]
            if i in prep_err or g.fallback:  # keep the first-stage order, flagged by status (fallback column)
                g.order, g.generated = [d for d, _ in first[i]][:cfg.rerank_depth], 0
            ranked = [(d, None, "generated") for d in g.order[:g.generated]]
            ranked += [(d, tail_scores[d], "first_stage") for d in g.order[g.generated:]]
            ranked += [(d, s, "first_stage") for d, s in first[i][cfg.rerank_depth:]]
            rows += run_rows(queries.base(i, "generative_rerank", modality, queries.text[i], status, error,
                                          g.model or reranker.model, g.prompt_version), ranked, g.raw_outputs)
    return rows


def rank_queries(chat: Chat, embed: Embed, embed_model: str, inferred: pl.DataFrame, documents: pl.DataFrame,
                 cfg: RetrievalConfig, reranker: RoleConfig) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Run rows (RUN_SCHEMA) of every configured ranker for every inferred query, and metadata.

    dense_rerank rows are labelled with `embed_model`, the model behind `embed` (the vectors' producer).
    generative_rerank runs text_only unless cfg.reranker_vision is on AND the reranker role's backend can
    take images (openai / vllm); then queries with images get a second, multimodal run."""
    vision = cfg.reranker_vision and reranker.backend != "llamacpp"
    doc_texts = {d: document_text(t, x) for d, t, x in documents.select("doc_id", "title", "text").iter_rows()}
    keyword_ids = dict(documents.select("doc_id", "keyword_id").iter_rows())
    index = BM25Index(list(doc_texts), list(doc_texts.values()))
    queries = _Queries(inferred)
    first = index.search(queries.text, cfg.first_stage_k)
    rows: list[dict] = []
    meta: dict[str, Any] = {"bm25_queries": inferred.height, "vision": vision}
    if cfg.reranker_vision and not vision:
        meta["vision_note"] = "reranker_vision is on but the reranker backend is llamacpp (no image input): text_only"
    if "bm25" in cfg.rankers:
        for i, hits in enumerate(first):
            rows += run_rows(queries.base(i, "bm25", TEXT_ONLY, queries.text[i], queries.status[i], queries.error[i]),
                             [(d, s, "first_stage") for d, s in hits])
    if "bm25_history" in cfg.rankers:
        conversations = inferred["conversation"].to_list()
        for i, hits in enumerate(index.search(conversations, cfg.first_stage_k)):
            rows += run_rows(queries.base(i, "bm25_history", TEXT_ONLY, conversations[i], Status.OK, None),
                             [(d, s, "first_stage") for d, s in hits])
    if "dense_rerank" in cfg.rankers and inferred.height:
        cand = [[d for d, _ in hits][:cfg.rerank_depth] for hits in first]  # the depth every re-ranker gets
        need = list(dict.fromkeys(d for c in cand for d in c))
        vecs = embed([doc_texts[d] for d in need])
        dense = dense_rerank(embed(queries.text), cand, dict(zip(need, vecs)))
        for i, ranked in enumerate(dense):
            tail = [(d, s, "first_stage") for d, s in first[i][cfg.rerank_depth:]]
            rows += run_rows(queries.base(i, "dense_rerank", TEXT_ONLY, queries.text[i], queries.status[i],
                                          queries.error[i], embed_model), [(d, s, "dense") for d, s in ranked] + tail)
        meta["dense_docs_embedded"] = len(need)
    if "generative_rerank" in cfg.rankers and inferred.height:
        rows += _generative_rows(chat, queries, first, doc_texts, keyword_ids, cfg, reranker, vision)
    return pl.DataFrame(rows, schema=RUN_SCHEMA), meta
