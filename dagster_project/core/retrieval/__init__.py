"""Multi-turn (multimodal) clarification for search (seed: ClariMM dataset + the Mario re-ranker), one module per
step; no Dagster. Inputs (clarification QA, documents, TREC qrels) are read by io/formats/retrieval.py.

- sessions.py: §3.1 session synthesis (streamed combinations, seeded reservoir sampling).
- refinement.py: Appendix A (prompt A similar pairs, prompt B reveal cut, Algorithm 1 answer rewrites).
- inference.py: Appendix D inferred query.
- documents.py: document text, snippets and YAKE keyword IDs; rankers.py: BM25, bm25_history, dense re-rank
  and the run rows; reranking.py: §4.3.2 constrained generative re-rank.
- evaluation.py + metrics.py: §5 MRR, P@k, nDCG@k per ranker, input, modality and number of turns.
"""
