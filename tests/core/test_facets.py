"""core/facets.py: FM-LOG sampling requests and exact dedup, FM-LLM parsing, fusion with origins."""

import json

import numpy as np
import polars as pl

from dagster_project.core.clarilm.facets import FM_LOG, fm_llm, fm_log, fm_log_training_pairs, fuse
from dagster_project.llm.chat import ChatResult

FM_LOG_SCHEMA = {  # the schema sent before the move to LLMTask: part of the cache key, must not change
    "type": "object",
    "properties": {"facet": {"type": "string", "maxLength": 60},
                   "clarifying_question": {"type": "string", "maxLength": 160}},
    "required": ["facet", "clarifying_question"],
}


def chat_with(*results):
    """chat(role, requests) answering with `results` in order; `chat.sent` holds the requests."""
    answers = iter(results)
    chat = lambda role, reqs: chat.sent.extend(reqs) or [next(answers) for _ in reqs]  # noqa: E731
    chat.sent = []
    return chat


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
    chat = chat_with(*[ChatResult(texts=["{}"] * 3, model="m")] * 2)
    fm_log(chat, QUESTIONS, pairs, k=3, n_demos=2, temperature=0.9, top_p=0.95, seed=7)
    reqs = chat.sent
    assert len(reqs) == 2 and all(r.sampling.n == 3 and r.sampling.temperature == 0.9 for r in reqs)
    assert reqs[0].sampling.max_tokens == 120 and reqs[0].sampling.top_p == 0.95 and reqs[0].sampling.seed == 7
    user = reqs[0].messages[-1]["content"]
    assert 'New request: "Book a table."' in user
    assert 'facet: "the language"' in user and 'facet: "the brand"' in user
    assert reqs[0].json_schema == FM_LOG_SCHEMA == FM_LOG.schema
    empty = chat_with(*[ChatResult(texts=["{}"] * 3, model="m")] * 2)
    fm_log(empty, QUESTIONS, pairs.clear(), 3, 2, 0.9, 0.95)
    assert "(no logged examples)" in empty.sent[0].messages[-1]["content"]


def test_parse_fm_log_exact_dedup_within_question_only():
    pairs = fm_log_training_pairs(TUPLES)
    chat = chat_with(
        ChatResult(texts=[_facet("The city", "Which city?"), _facet("the  city!", "What city?"), "garbage"], model="m"),
        ChatResult(texts=[_facet("the city", "Where to?"), _facet("dates", "When?"), _facet("budget", "How much?")],
                   model="m"),
    )
    out = fm_log(chat, QUESTIONS, pairs, 3, 1, 0.9, 0.95)
    assert out.select("facet_id", "status", "kept", "duplicate_of", "reject_reason").rows() == [
        ("qg-b:log:0", "ok", True, None, None), ("qg-b:log:1", "ok", True, None, None),
        ("qg-b:log:2", "ok", True, None, None),
        ("ql-a:log:0", "ok", True, None, None), ("ql-a:log:1", "ok", False, "ql-a:log:0", "exact_duplicate"),
        ("ql-a:log:2", "parse_error", False, None, "parse_error"),
    ]
    assert out.filter(pl.col("facet_id") == "ql-a:log:2")["raw_output"][0] == "garbage"
    failed = fm_log(chat_with(ChatResult(texts=["", "", ""], error="boom", model="m")), QUESTIONS.head(1), pairs,
                    3, 1, 0.9, 0.95)
    assert failed["status"].to_list() == ["llm_error"] * 3 and not failed["kept"].any()


def test_parse_fm_llm_items_and_failures():
    good = json.dumps({"facets": [{"facet": "date", "clarifying_question": "Which day?"}, {"facet": "only"},
                                  {"facet": "party size", "clarifying_question": "How many people?"}]})
    chat = chat_with(ChatResult(texts=[good], model="m"), ChatResult(texts=['{"facets": []}'], model="m"))
    out = fm_llm(chat, QUESTIONS, max_facets=4)
    reqs = chat.sent
    assert reqs[0].json_schema == {"type": "object", "required": ["facets"], "properties": {"facets": {
        "type": "array", "minItems": 1, "maxItems": 4, "items": FM_LOG_SCHEMA}}}
    assert reqs[0].sampling.max_tokens == 440 and reqs[0].sampling.temperature == 0.7
    assert "up to 4 different things" in reqs[0].messages[-1]["content"]
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
    out, search = fuse(log, llm, first_word_embed, tau=0.9, block=1)
    # q1's 4 facets: 6 pairs compared, the two "city" ones similar; q2 has one facet, nothing to compare
    assert search == {"dedup_method": "exact", "dedup_candidates": 6, "dedup_verified_pairs": 1}
    rows = {r["facet_id"]: r for r in out.to_dicts()}
    assert set(rows) == {"q1:log:0", "q1:log:1", "q1:llm:0", "q1:llm:1", "q2:llm:2"}  # q2:log:2 was not kept
    assert not rows["q1:llm:0"]["kept"] and rows["q1:llm:0"]["duplicate_of"] == "q1:log:0"
    assert rows["q1:log:0"]["merged_origins"] == ["llm", "log"]
    assert rows["q1:log:1"]["merged_origins"] == ["log"] and rows["q1:llm:1"]["kept"]
    # the same facet text under another question is not a duplicate
    assert rows["q2:llm:2"]["kept"] and rows["q2:llm:2"]["duplicate_of"] is None


def test_fuse_with_nothing_kept():
    empty = _rows("log", [("q1", "a", "b", False)])
    out, search = fuse(empty, empty.with_columns(origin=pl.lit("llm")), first_word_embed, 0.9, 8)
    assert out.height == 0 and search["dedup_method"] == "none"
