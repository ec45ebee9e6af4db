"""core/facets.py: FM-LOG sampling requests and exact dedup, FM-LLM parsing, fusion with origins."""

import json

import numpy as np
import polars as pl

from dagster_project.llm.chat import ChatResult
from dagster_project.core.clarilm.facets import (
    FM_LOG_SCHEMA,
    fm_llm_requests,
    fm_log_requests,
    fm_log_training_pairs,
    fuse,
    parse_fm_llm,
    parse_fm_log,
)

QUESTIONS = pl.DataFrame({"question_id": ["ql-a", "qg-b"], "question": ["Book a table.", "Plan a trip."],
                          "question_source": ["log", "generated"]})
TUPLES = pl.DataFrame({"q_i": ["Fix my code", "Buy a watch", "Noise"], "facet": ["the language", "the brand", None],
                       "c": ["Which language?", "Which brand?", None], "kept": [True, True, False]})


def _facet(f, c):
    return json.dumps({"facet": f, "clarifying_question": c})


def first_word_embed(texts):
    """Texts sharing their first word are identical vectors; others orthogonal."""
    words = sorted({t.split()[0].lower().strip(":") for t in texts})
    out = np.zeros((len(texts), len(words)), dtype=np.float32)
    for i, t in enumerate(texts):
        out[i, words.index(t.split()[0].lower().strip(":"))] = 1.0
    return out


def test_training_pairs_and_fm_log_requests():
    pairs = fm_log_training_pairs(TUPLES)
    assert pairs.rows() == [("Fix my code", "the language", "Which language?"), ("Buy a watch", "the brand", "Which brand?")]
    reqs = fm_log_requests(QUESTIONS, pairs, k=3, n_demos=2, temperature=0.9, top_p=0.95, seed=7)
    assert len(reqs) == 2 and all(r.sampling.n == 3 and r.sampling.temperature == 0.9 for r in reqs)
    user = reqs[0].messages[-1]["content"]
    assert 'New request: "Book a table."' in user
    assert 'facet: "the language"' in user and 'facet: "the brand"' in user
    assert reqs[0].json_schema == FM_LOG_SCHEMA
    empty = fm_log_requests(QUESTIONS, pairs.clear(), 3, 2, 0.9, 0.95)
    assert "(no logged examples)" in empty[0].messages[-1]["content"]


def test_parse_fm_log_exact_dedup_within_question_only():
    reqs = fm_log_requests(QUESTIONS, fm_log_training_pairs(TUPLES), 3, 1, 0.9, 0.95)
    results = [
        ChatResult(texts=[_facet("The city", "Which city?"), _facet("the  city!", "What city?"), "garbage"], model="m"),
        ChatResult(texts=[_facet("the city", "Where to?"), _facet("dates", "When?"), _facet("budget", "How much?")],
                   model="m"),
    ]
    out = parse_fm_log(QUESTIONS, reqs, results)
    assert out.select("facet_id", "status", "kept", "duplicate_of", "reject_reason").rows() == [
        ("qg-b:log:0", "ok", True, None, None), ("qg-b:log:1", "ok", True, None, None),
        ("qg-b:log:2", "ok", True, None, None),
        ("ql-a:log:0", "ok", True, None, None), ("ql-a:log:1", "ok", False, "ql-a:log:0", "exact_duplicate"),
        ("ql-a:log:2", "parse_error", False, None, "parse_error"),
    ]
    assert out.filter(pl.col("facet_id") == "ql-a:log:2")["raw_output"][0] == "garbage"
    failed = parse_fm_log(QUESTIONS.head(1), reqs[:1], [ChatResult(texts=["", "", ""], error="boom", model="m")])
    assert failed["status"].to_list() == ["llm_error"] * 3 and not failed["kept"].any()


def test_parse_fm_llm_items_and_failures():
    reqs = fm_llm_requests(QUESTIONS, max_facets=4)
    assert reqs[0].json_schema["properties"]["facets"]["maxItems"] == 4
    assert "up to 4 different things" in reqs[0].messages[-1]["content"]
    good = json.dumps({"facets": [{"facet": "date", "clarifying_question": "Which day?"}, {"facet": "only"},
                                  {"facet": "party size", "clarifying_question": "How many people?"}]})
    out = parse_fm_llm(QUESTIONS, reqs, [ChatResult(texts=[good], model="m"),
                                         ChatResult(texts=['{"facets": []}'], model="m")])
    assert out.select("facet_id", "facet", "status").rows() == [
        ("qg-b:llm:x", None, "parse_error"), ("ql-a:llm:0", "date", "ok"), ("ql-a:llm:1", "party size", "ok")]
    assert out.filter(pl.col("status") == "ok")["kept"].all()


def _rows(origin, items):
    return pl.DataFrame([{"facet_id": f"{q}:{origin}:{i}", "question_id": q, "question": "x", "question_source": "log",
                          "origin": origin, "facet": f, "clarifying_question": c, "kept": k}
                         for i, (q, f, c, k) in enumerate(items)])


def test_fuse_dedups_per_question_and_prefers_log():
    log = _rows("log", [("q1", "city", "Which city?", True), ("q1", "budget", "How much?", True),
                        ("q2", "zzz", "ignored", False)])
    llm = _rows("llm", [("q1", "city", "In which city are you?", True), ("q1", "cuisine", "What food?", True),
                        ("q2", "city", "Which city?", True)])
    out = fuse(log, llm, first_word_embed, tau=0.9, block=1)
    rows = {r["facet_id"]: r for r in out.to_dicts()}
    assert set(rows) == {"q1:log:0", "q1:log:1", "q1:llm:0", "q1:llm:1", "q2:llm:2"}  # q2:log:2 was not kept
    assert not rows["q1:llm:0"]["kept"] and rows["q1:llm:0"]["duplicate_of"] == "q1:log:0"
    assert rows["q1:log:0"]["merged_origins"] == ["llm", "log"]
    assert rows["q1:log:1"]["merged_origins"] == ["log"] and rows["q1:llm:1"]["kept"]
    # the same facet text under another question is not a duplicate
    assert rows["q2:llm:2"]["kept"] and rows["q2:llm:2"]["duplicate_of"] is None


def test_fuse_with_nothing_kept():
    empty = _rows("log", [("q1", "a", "b", False)])
    assert fuse(empty, empty.with_columns(origin=pl.lit("llm")), first_word_embed, 0.9, 8).height == 0
