"""The stand-in for ClariMM's trained multimodal re-ranker (issue 26), text only: the subject LM reads the
conversation, the query and ONE candidate document and answers "yes" or "no". LoRA SFT teaches it on the train
facets of retrieval/reranker_training (its relevant document -> "yes", BM25 negatives -> "no"); at scoring time each
candidate gets log P(yes) - log P(no) at the first reply token (one forward pass, no generation), and the BM25 head
is re-ordered by that score."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import polars as pl

from dagster_project.core.retrieval.documents import snippet
from dagster_project.core.training.template import TrainedTemplate
from dagster_project.llm.chat import Message
from dagster_project.llm.prompts import load_prompt

PROMPT = load_prompt("retrieval_yes_no")
YES, NO = "yes", "no"
REPLY_FORMAT = ('"yes" when the document meets the need, else "no"; scored by log P(yes) - log P(no) at the first '
                'reply token')
NO_CONVERSATION = "(none)"
# prompts -> one relevance score per prompt (log P(yes) - log P(no) at the first reply token; llm/yes_no.py)
Score = Callable[[Sequence[list[Message]]], list[float]]


def template() -> TrainedTemplate:
    """The template training.json records: the retrieval_yes_no prompt, the query in the user slot, parser yes_no."""
    return TrainedTemplate(PROMPT.name, PROMPT.system, PROMPT.user, "query", REPLY_FORMAT, "yes_no")


def relevance_prompt(query: str, conversation: str | None, document: str, doc_chars: int) -> list[Message]:
    """The messages the re-ranker judges one candidate with (the training rows' prompt, word for word)."""
    return template().render([{"role": "user", "content": query}],
                           conversation=(conversation or "").strip() or NO_CONVERSATION,
                           document=snippet(document, doc_chars))


def sft_rows(examples: pl.DataFrame, doc_texts: dict[str, str], conversations: dict[str, str], negatives: int,
             doc_chars: int, split: str = "train") -> list[dict[str, Any]]:
    """TRL prompt/completion rows from the kept rows of `split` (train only: the test facets stay unseen): per row
    its relevant document -> "yes", then its first `negatives` BM25 negatives -> "no". The query is the one the
    rankers search with (query_text); the conversation is the session's (retrieval/inferred_queries, by query_id).
    A row whose query has no conversation raises ValueError naming the example."""
    rows: list[dict[str, Any]] = []
    kept = examples.filter(pl.col("kept") & (pl.col("split") == split)).sort("example_id")
    for r in kept.iter_rows(named=True):
        if r["query_id"] not in conversations:
            raise ValueError(f"retrieval/reranker_training example {r['example_id']!r}: query_id {r['query_id']!r} "
                             "has no row in retrieval/inferred_queries (rebuild the retrieval group)")
        conv = conversations[r["query_id"]]
        negs = [d for d in r["negative_doc_ids"] if d in doc_texts][:negatives]
        for doc, label in [(r["positive_doc_id"], YES), *((d, NO) for d in negs)]:
            rows.append({"prompt": relevance_prompt(r["query_text"], conv, doc_texts[doc], doc_chars),
                         "completion": [{"role": "assistant", "content": label}]})
    return rows


def order_by_score(docs: Sequence[str], scores: Sequence[float]) -> list[tuple[str, float]]:
    """(doc, score) best first; ties keep the given (first-stage) order."""
    return sorted(zip(docs, scores, strict=True), key=lambda p: -p[1])
