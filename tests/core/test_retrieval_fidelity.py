"""Issue 15 items 12-15: every ranker on the same queries, a full generated ranking, the re-ranker training export
and counted refinement parse errors."""

import polars as pl
import pytest

from dagster_project.core.retrieval.evaluation import evaluation_table, expected_queries
from dagster_project.core.retrieval.metrics import ranking_metrics
from dagster_project.llm.chat import ChatResult


def _runs(failed_query: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """bm25 and generative_rerank on queries a, b; generative failed on `failed_query` and kept bm25's order."""
    rows = []
    for q, bm, gen in (("a", ["x", "r"], ["r", "x"]), ("b", ["x", "r"], ["r", "x"])):
        failed = q == failed_query
        for ranker, order in (("bm25", bm), ("generative_rerank", bm if failed else gen)):
            for k, d in enumerate(order, start=1):
                rows.append({"run_id": f"{ranker}/multi_turn/text_only", "ranker": ranker, "modality": "text_only",
                             "query_id": q, "rank": k, "doc_id": d,
                             "stage": "generated" if ranker == "generative_rerank" and not failed else "first_stage",
                             "status": "llm_error" if failed and ranker == "generative_rerank" else "ok"})
    inferred = pl.DataFrame({"query_id": ["a", "b"], "input": ["multi_turn"] * 2, "facet_id": ["F"] * 2,
                             "n_turns": [2, 2], "status": ["ok"] * 2, "images": [[], []]})
    runs = pl.DataFrame(rows)
    return runs, expected_queries(inferred, runs, ["bm25", "generative_rerank"])


def test_every_ranker_is_scored_on_the_same_queries():
    runs, exp = _runs(failed_query="b")
    qrels = pl.DataFrame({"qid": ["F"], "doc_id": ["r"], "rel": [1]})
    table, _ = evaluation_table(runs, exp, qrels, [1], ranking_metrics, "first_stage", rerank_depth=2)
    o = {r["ranker"]: r for r in table.filter(pl.col("breakdown") == "overall").iter_rows(named=True)}
    # the failed re-rank is scored on the BM25 order it kept (RR .5), flagged; both rankers have n = 2
    assert (o["bm25"]["n_queries"], o["generative_rerank"]["n_queries"]) == (2, 2)
    assert (o["bm25"]["n_fallback"], o["generative_rerank"]["n_fallback"]) == (0, 1)
    assert o["generative_rerank"]["mrr"] == pytest.approx(0.75) and o["bm25"]["mrr"] == pytest.approx(0.5)
    assert o["generative_rerank"]["generated_share"] == pytest.approx(0.5) and o["bm25"]["generated_share"] is None
    dropped, _ = evaluation_table(runs, exp, qrels, [1], ranking_metrics, "drop_query", rerank_depth=2)
    d = {r["ranker"]: r for r in dropped.filter(pl.col("breakdown") == "overall").iter_rows(named=True)}
    # drop_query: b leaves BOTH rankers, not only the one that failed
    assert (d["bm25"]["n_queries"], d["generative_rerank"]["n_queries"]) == (1, 1)
    assert (d["bm25"]["n_excluded"], d["generative_rerank"]["mrr"]) == (1, pytest.approx(1.0))


def test_an_unparseable_refinement_verdict_is_a_counted_parse_error_row_the_check_bounds():
    from dagster_project.config import parse_params
    from dagster_project.core.retrieval.refinement import SIMILAR, refine_sessions
    from dagster_project.defs.quality.checks import load_suites, validate_frame

    qa = {f"F1/{x}": {"topic_id": "T1", "facet_desc": "f", "initial_request": "r", "question_id": x,
                      "question": f"q {x}", "answer": f"a {x}", "images": []} for x in "abcd"}
    cands = pl.DataFrame([{"session_id": f"L2:F1:{x}", "facet_id": "F1", "sampled_length": 2, "stream_index": k,
                           "qa_ids": [f"F1/{x[0]}", f"F1/{x[1]}"]} for k, x in enumerate(["ab", "cd"])]).with_columns(
        combinations_available=pl.lit(6), target_per_length=pl.lit(2))
    req = SIMILAR.request({"question1": "q", "answer1": "a", "question2": "q2", "answer2": "a2"}, seed=0)
    [bad] = SIMILAR.outcomes(None, req, ChatResult(texts=['{"information": "perhaps"}'], model="m"))
    [good] = SIMILAR.outcomes(None, req, ChatResult(texts=['{"information": "different"}'], model="m"))
    out = refine_sessions(cands, qa, {("F1/a", "F1/b"): good, ("F1/c", "F1/d"): bad}, {}, {})
    rows = {r["session_id"]: r for r in out.iter_rows(named=True)}
    assert rows["L2:F1:ab"]["kept"] and rows["L2:F1:ab"]["status"] == "ok"
    dropped = rows["L2:F1:cd"]
    assert not dropped["kept"] and dropped["status"] == "parse_error"
    assert dropped["reject_reason"] == "judge verdict unusable (parse_error): similar_pair F1/c ~ F1/d"
    suite = {f"{s.group}/{s.asset}": s for s in load_suites()}["retrieval/sessions"]
    ok, meta = validate_frame(out, suite, parse_params({"quality": {"max_error_rate": 0.2}}))
    failed = [k for k, v in meta.items() if not v["success"]]
    assert not ok and len(failed) == 1 and "parse_error or llm_error" in failed[0]  # 1 of 2 > 0.2
    assert validate_frame(out, suite, parse_params({"quality": {"max_error_rate": 0.5}}))[0]


def test_facet_split_is_80_10_10_by_facet_and_seeded():
    from dagster_project.core.retrieval.training import facet_splits

    facets = [f"F{i}" for i in range(20)]
    split = facet_splits(facets + facets[:5], [0.8, 0.1, 0.1], seed=3)  # repeats do not matter
    assert set(split) == set(facets)
    assert sorted(list(split.values()).count(s) for s in ("train", "val", "test")) == [2, 2, 16]
    assert split == facet_splits(list(reversed(facets)), [0.8, 0.1, 0.1], seed=3)
    assert split != facet_splits(facets, [0.8, 0.1, 0.1], seed=4)


def test_reranker_training_export_matches_inference_and_loads_in_datasets(tmp_path):
    import json

    from dagster_project.config import RetrievalConfig
    from dagster_project.core.retrieval.documents import snippet
    from dagster_project.core.retrieval.reranking import rerank_step_request
    from dagster_project.core.retrieval.training import training_examples, trl_records

    docs = pl.DataFrame({"doc_id": ["d1", "d2", "d3", "d4"], "title": [None] * 4,
                         "text": ["red leather sofa", "blue leather sofa", "leather care", "garden tools"],
                         "keyword_id": ["red sofa", "blue sofa", "leather care", "garden tools"]})
    inferred = pl.DataFrame({"query_id": ["s1|multi_turn", "s2|multi_turn"], "session_id": ["s1", "s2"],
                             "input": ["multi_turn"] * 2, "topic_id": ["T1", "T2"], "facet_id": ["F1", "F2"],
                             "initial_request": ["sofa", "tools"], "conversation": ["User: sofa", "User: tools"],
                             "inferred_query": ["leather sofa", None], "status": ["ok", "parse_error"]})
    cfg = RetrievalConfig(training_negatives=2, snippet_chars=20, facet_split=[1.0, 0.0, 0.0])
    out = training_examples(inferred, docs, {"F1": {"d1": 1, "d2": 0}, "F2": {"d4": 0}}, ["F1", "F2"], cfg)
    kept = out.filter(pl.col("kept")).row(0, named=True)
    assert kept["positive_doc_id"] == "d1" and kept["split"] == "train" and kept["topic_seen"]
    assert set(kept["negative_doc_ids"]) == {"d2", "d3"}  # BM25 hits that are not relevant (judged 0 included)
    assert sorted(kept["candidate_doc_ids"]) == ["d1", "d2", "d3"]
    text = {"d1": "red leather sofa", "d2": "blue leather sofa", "d3": "leather care"}
    kid = dict(docs.select("doc_id", "keyword_id").iter_rows())
    same = rerank_step_request("leather sofa", "User: sofa",
                               [(kid[d], snippet(text[d], 20)) for d in kept["candidate_doc_ids"]], [])
    assert kept["prompt"] == [dict(m) for m in same.messages]  # exactly what inference sends at rank 1
    assert json.loads(kept["completion"][0]["content"]) == {"next": "red sofa"}
    assert out.filter(~pl.col("kept"))["reject_reason"].to_list() == ["facet has no relevant document"]
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in trl_records(out, "train")) + "\n")
    import datasets

    ds = datasets.load_dataset("json", data_files=str(path), split="train")
    assert ds.column_names == ["prompt", "completion"] and len(ds) == 1
