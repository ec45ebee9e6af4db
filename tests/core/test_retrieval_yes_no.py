"""The yes/no generative re-ranker's pure parts: its SFT rows (train split only, "yes" for the relevant document,
"no" for BM25 negatives, in the template training.json records), its reply parser and the re-ordered run rows."""

import polars as pl
import pytest

from dagster_project.core.retrieval import yes_no
from dagster_project.core.retrieval.headline import yes_no_runs
from dagster_project.core.retrieval.rankers import RUN_SCHEMA
from dagster_project.core.training.template import TrainedTemplate

DOCS = {"d1": "red running shoes", "d2": "green wool socks", "d3": "a blue summer hat", "d4": "black boots"}


def _examples():
    rows = [("q1|d1", "q1", "running shoes", "train", True, "d1", ["d2", "d4"]),
            ("q2|d3", "q2", "summer hat", "test", True, "d3", ["d4"]),
            ("q3|none", "q3", "boots", "train", False, None, [])]
    return pl.DataFrame([{"example_id": e, "query_id": q, "query_text": t, "split": s, "kept": k,
                          "positive_doc_id": p, "negative_doc_ids": n} for e, q, t, s, k, p, n in rows],
                        schema_overrides={"negative_doc_ids": pl.List(pl.Utf8)})


def test_sft_rows_say_yes_to_the_relevant_document_and_no_to_bm25_negatives_of_the_train_split_only():
    convs = {"q1": "User: shoes?\nSystem: for running?\nUser: yes", "q2": "User: a hat"}
    rows = yes_no.sft_rows(_examples(), DOCS, convs, negatives=1, doc_chars=400)
    assert [r["completion"] for r in rows] == [[{"role": "assistant", "content": "yes"}],
                                               [{"role": "assistant", "content": "no"}]]
    user = [r["prompt"][-1]["content"] for r in rows]
    assert "running shoes" in user[0] and "red running shoes" in user[0] and "green wool socks" in user[1]
    assert "User: shoes?\nSystem: for running?\nUser: yes" in user[0]
    assert not any("summer hat" in u for u in user)  # the test facet's query never reaches training
    template = TrainedTemplate.from_record(yes_no.template().record())
    assert all(template.mismatch(r["prompt"]) is None for r in rows)  # what training/_lm checks before training
    assert len(yes_no.sft_rows(_examples(), DOCS, convs, negatives=5, doc_chars=400)) == 3


def test_a_query_without_a_conversation_is_named():
    with pytest.raises(ValueError, match="'q1\\|d1'.*'q1'.*inferred_queries"):
        yes_no.sft_rows(_examples(), DOCS, {}, negatives=1, doc_chars=400)


def test_the_document_is_cut_and_an_empty_conversation_says_none():
    [_, user] = yes_no.relevance_prompt("hat", "  ", "word " * 100, doc_chars=20)
    assert "(none)" in user["content"] and "word word word word ..." in user["content"]


def test_the_parser_reads_yes_or_no():
    t = yes_no.template()
    assert (t.parse("Yes.").action, t.parse("Yes.").text) == ("answer", "yes")
    assert t.parse(" no, it is not").text == "no"
    assert t.parse("maybe").action == "invalid" and t.parse("yesterday").action == "invalid"


def test_runs_reorder_the_head_by_one_batched_score_call_and_keep_bm25_below_it():
    bm25 = pl.DataFrame([{c: None for c in RUN_SCHEMA} | {
        "query_id": q, "input": "multi_turn", "ranker": "bm25", "modality": "text_only", "run_id": "bm25/x",
        "rank": r, "doc_id": d, "score": 9.0 - r, "query_text": text, "status": "ok"}
        for q, text in (("a", "boots"), ("b", "socks")) for r, d in enumerate(["d1", "d2", "d3", "d4"], start=1)],
        schema=RUN_SCHEMA)
    calls = []

    def score(prompts):  # yes when the query's word is in the document
        calls.append(len(prompts))
        texts = [p[-1]["content"] for p in prompts]
        return [2.0 if t.split("looking for: ")[1].split()[0] in t.split("Document:")[1] else 0.0 for t in texts]

    out = yes_no_runs(bm25, score, DOCS, {"a": "User: boots"}, depth=3, doc_chars=400, ranker="yes_no_lora_rerank",
                      model="training/reranker_generative")
    assert calls == [6]  # every query's top 3, in one call
    order = {q: g.sort("rank")["doc_id"].to_list() for (q,), g in out.group_by(["query_id"])}
    assert order == {"a": ["d1", "d2", "d3", "d4"], "b": ["d2", "d1", "d3", "d4"]}  # d4 (boots) is below the depth
    assert set(out["stage"]) == {"yes_no", "first_stage"} and set(out["modality"]) == {"text_only"}
    assert set(out["run_id"]) == {"yes_no_lora_rerank/multi_turn/text_only"}
