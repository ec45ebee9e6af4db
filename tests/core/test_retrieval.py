"""core/retrieval/, its input formats (io/formats/retrieval.py, trec.py) and the ranking metrics: hand-computed
cases (no Dagster, no model, no network)."""

import itertools
import json
import math
import random
from collections import Counter

import jsonschema
import numpy as np
import polars as pl
import pytest

from dagster_project.config import ParamsError, parse_params
from dagster_project.io.images import image_part
from dagster_project.core.retrieval.documents import keyword_ids
from dagster_project.core.retrieval.evaluation import (
    evaluation_table,
    expected_queries,
    relevant_by_facet,
)
from dagster_project.core.retrieval.inference import INFER, inference_inputs
from dagster_project.core.retrieval.metrics import ranking_metrics
from dagster_project.core.retrieval.rankers import BM25Index, dense_rerank, run_rows
from dagster_project.core.retrieval.refinement import (
    REVEALED,
    REVEALED_CHOICES,
    REWRITE,
    SIMILAR,
    SIMILAR_CHOICES,
    cut_at_reveal,
    length_summary,
    refine_sessions,
    rewrite_stage,
)
from dagster_project.core.retrieval.reranking import (
    GenerativeTask,
    generative_rerank,
    rerank_step_request,
)
from dagster_project.core.retrieval.sessions import (
    count_combinations,
    facet_pools,
    iter_combinations,
    reservoir_sample,
    sample_sessions,
)
from dagster_project.io.formats.retrieval import (
    import_clarification_qa,
    import_documents,
    import_qrels,
    parse_images,
)
from dagster_project.io.formats.trec import (
    parse_qrels,
    parse_trec_run,
    to_trec_qrels,
    to_trec_run,
)
from dagster_project.io.records import InputFileError
from dagster_project.llm.chat import ChatRequest, ChatResult
from dagster_project.llm.task import Outcome, Status

CLARIQ_HEADER = "topic_id\tinitial_request\ttopic_desc\tclarification_need\tfacet_id\tfacet_desc\tquestion_id\tquestion\tanswer"


# ----------------------------------------------------------------------------------------------- imports

def test_clariq_tsv_read_as_is_and_bad_rows_quarantined(tmp_path):
    lines = [
        CLARIQ_HEADER,
        '133\tall men are created equal\t"Who said \\""all men are created equal\\""?"\t2\tF0134\t'
        '"Who said ""all men are created equal""?"\tQ00796\tare you looking for the declaration\tno, who said it',
        "133\tall men are created equal\tx\t2\tF0134\tWho said it?\tQ03598\twould you like the gettysburg address\tno",
        "133\tall men are created equal\tx\t2\tF0134\tWho said it?\tQ00001\t\t",            # no question
        "133\tall men are created equal\tx\t2\tF0134\tWho said it?\tQ03598\tagain\tdup",    # repeated pair
        "134\tother\tx\t2\tF0134\tWho said it?\tQ1\tq\ta",                                 # facet under 2 topics
        "135\ttoo\tfew",                                                                       # 3 fields
    ]
    (tmp_path / "dev.tsv").write_text("\n".join(lines) + "\n")
    imp = import_clarification_qa(tmp_path / "dev.tsv")
    assert imp.n_records == 6 and imp.kept.height == 2 and imp.rejected.height == 4
    first = imp.kept.row(0, named=True)
    assert first["facet_desc"] == 'Who said "all men are created equal"?'  # CSV quoting of the ClariQ export
    # record = data row of the file (io.records: the header is not a record)
    assert first["qa_id"] == "F0134/Q00796" and first["images"] == [] and first["record"] == 1
    assert imp.rejected.columns == ["file", "record", "field", "reason", "raw"]
    assert set(imp.rejected["file"]) == {(tmp_path / "dev.tsv").as_posix()}
    rej = {r["record"]: (r["field"], r["reason"]) for r in imp.rejected.iter_rows(named=True)}
    assert rej[3] == ("question", "empty or missing field 'question'")
    assert rej[4][0] == "question_id" and "first at record 2" in rej[4][1]
    assert rej[5] == ("facet_id", "facet F0134 already belongs to topic 133 (record 1)")
    assert rej[6] == ("<record>", "ragged_row: expected 9 fields, got 3")
    assert json.loads(imp.rejected.filter(pl.col("record") == 3)["raw"].item())["question_id"] == "Q00001"


def test_qa_jsonl_with_images_and_broken_lines(tmp_path):
    good = {"topic_id": 7, "initial_request": "sofa", "facet_id": "F1", "facet_desc": "leather sofa",
            "question_id": "Q1", "question": "which material", "answer": "leather", "images": ["a.jpg", "b.png"]}
    rows = [json.dumps(good), "{broken", json.dumps([1, 2]),
            json.dumps({**good, "question_id": "Q2", "images": "c.jpg|d.jpg"}),
            json.dumps({**good, "question_id": "Q3", "images": 5})]
    (tmp_path / "qa.jsonl").write_text("\n".join(rows) + "\n")
    imp = import_clarification_qa(tmp_path / "qa.jsonl")
    assert imp.kept["images"].to_list() == [["a.jpg", "b.png"], ["c.jpg", "d.jpg"]]
    assert imp.kept["topic_id"].to_list() == ["7", "7"]  # ids as text
    reasons = dict(zip(imp.rejected["record"], imp.rejected["reason"]))
    assert reasons[2].startswith("invalid_json: ") and reasons[3] == "not_an_object: expected a JSON object, got list"
    assert reasons[5].startswith("unreadable image list")


def test_parse_images_forms():
    assert parse_images(None) == [] and parse_images("") == []
    assert parse_images('["x.jpg", " y.jpg "]') == ["x.jpg", "y.jpg"]
    assert parse_images("x.jpg; y.jpg|z.jpg") == ["x.jpg", "y.jpg", "z.jpg"]
    with pytest.raises(ValueError):
        parse_images("[not json")


def test_unreadable_files_raise_naming_file_and_column(tmp_path):
    with pytest.raises(InputFileError, match="nope.tsv: file not found"):
        import_clarification_qa(tmp_path / "nope.tsv")
    (tmp_path / "d.xml").write_text("<x/>")
    with pytest.raises(InputFileError, match=r"unsupported file type '.xml'.*\(params: retrieval.documents_path\)"):
        import_documents(tmp_path / "d.xml")
    (tmp_path / "d.jsonl").write_text('{"id": "1", "text": "x"}\n')
    with pytest.raises(InputFileError, match=r"d.jsonl: missing column\(s\) \['doc_id'\].*\(params: retrieval"):
        import_documents(tmp_path / "d.jsonl")


def test_documents_quarantine(tmp_path):
    rows = [{"doc_id": "D1", "text": "a", "title": "t"}, {"doc_id": "D2", "text": "  "}, {"doc_id": "D1", "text": "b"},
            {"doc_id": 3, "text": "c"}]
    (tmp_path / "docs.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    imp = import_documents(tmp_path / "docs.jsonl")
    assert imp.kept["doc_id"].to_list() == ["D1", "3"]
    assert imp.rejected["reason"].to_list() == ["empty or missing field 'text'", "duplicate doc_id D1 (first at record 1)"]


def test_qrels_parsing_and_unknown_ids(tmp_path):
    rows, rejected = parse_qrels(["# comment", "F1 0 D1 2", "", "F1 0 D2", "F1 0 D3 x", "F2 Q0 D1 -2"])
    assert [(r["qid"], r["doc_id"], r["rel"], r["record"]) for r in rows] == [("F1", "D1", 2, 2), ("F2", "D1", -2, 6)]
    assert [(r["record"], r["field"]) for r in rejected.rows] == [(4, "<record>"), (5, "rel")]
    (tmp_path / "q.txt").write_text("F1 0 D1 1\nF1 0 D1 2\nF9 0 D1 1\nF1 0 D9 1\nF1 0 D2 0\n")
    imp = import_qrels(tmp_path / "q.txt", ["F1"], ["D1", "D2"])
    assert imp.kept.select("qid", "doc_id", "rel").rows() == [("F1", "D1", 1), ("F1", "D2", 0)]
    assert imp.rejected["reason"].to_list() == ["duplicate judgement F1/D1 (first at line 1)", "unknown facet id F9",
                                                "unknown doc id D9"]
    assert imp.n_records == 5
    assert relevant_by_facet(imp.kept) == {"F1": {"D1": 1, "D2": 0}}


def test_trec_run_round_trip_and_qrels_export():
    runs = pl.DataFrame({"query_id": ["s1|multi_turn"] * 3, "rank": [2, 1, 3], "doc_id": ["D2", "D1", "D3"],
                         "score": [1.5, 2.0, None], "run_id": ["bm25/multi_turn/text_only"] * 3})
    text = to_trec_run(runs)
    assert text.splitlines()[0] == "s1|multi_turn Q0 D1 1 2.000000 bm25/multi_turn/text_only"
    assert text.splitlines()[2].split()[4] == f"{1 / 3:.6f}"  # no score: 1/rank
    parsed, rejected = parse_trec_run(text.splitlines() + ["bad line", "q Q0 d one 1.0 t"])
    assert parsed["doc_id"].to_list() == ["D1", "D2", "D3"] and parsed["rank"].to_list() == [1, 2, 3]
    assert [r["record"] for r in rejected.rows] == [4, 5]
    qrels = pl.DataFrame({"qid": ["F1", "F1", "F2"], "doc_id": ["D1", "D2", "D3"], "rel": [2, 0, 1]})
    qf = pl.DataFrame({"query_id": ["a|multi_turn", "a|single_turn"], "facet_id": ["F1", "F1"]})
    assert to_trec_qrels(qrels, qf) == ("a|multi_turn 0 D1 2\na|multi_turn 0 D2 0\n"
                                          "a|single_turn 0 D1 2\na|single_turn 0 D2 0\n")


# ----------------------------------------------------------------------------------------------- sessions

POOLS = [("F1", ["F1/a", "F1/b", "F1/c", "F1/d"]), ("F2", ["F2/e", "F2/f", "F2/g"])]


def test_combination_counts():
    assert [count_combinations(POOLS, n) for n in (2, 3, 4, 5)] == [6 + 3, 4 + 1, 1, 0]
    for n in (2, 3, 4):
        assert sum(1 for _ in iter_combinations(POOLS, n)) == count_combinations(POOLS, n)
    assert list(iter_combinations(POOLS, 3))[-1] == ("F2", ("F2/e", "F2/f", "F2/g"))


def test_combinations_stream_lazily():
    """Two million pairs exist; the first few arrive without generating the rest."""
    big = [("F", [f"F/{i}" for i in range(2001)])]
    assert count_combinations(big, 2) == 2001 * 2000 // 2
    stream = iter_combinations(big, 2)
    assert list(itertools.islice(stream, 2)) == [("F", ("F/0", "F/1")), ("F", ("F/0", "F/2"))]
    assert next(stream) == ("F", ("F/0", "F/3"))


def test_reservoir_sample_small_stream_and_determinism():
    assert reservoir_sample(iter("ab"), 5, random.Random(0)) == [(0, "a"), (1, "b")]
    assert reservoir_sample(iter("ab"), 0, random.Random(0)) == []
    a = reservoir_sample(range(10_000), 7, random.Random("s"))
    assert a == reservoir_sample(range(10_000), 7, random.Random("s"))
    assert a != reservoir_sample(range(10_000), 7, random.Random("t"))
    assert len(a) == 7 and [i for i, _ in a] == sorted(i for i, _ in a) and all(i == x for i, x in a)


def test_reservoir_sample_is_uniform():
    """k=2 of 5: each of the 10 subsets should come up about 1/10 of the time (binomial sd ~ 21 of 500)."""
    rng = random.Random(123)
    counts = Counter(tuple(x for _, x in reservoir_sample(range(5), 2, rng)) for _ in range(5000))
    assert set(counts) == set(itertools.combinations(range(5), 2))
    assert all(400 < c < 600 for c in counts.values()), counts
    # and deep in a long stream: every item has inclusion probability k/n
    hits = Counter(x for _ in range(3000) for _, x in reservoir_sample(range(50), 5, rng))
    assert all(200 < hits[i] < 400 for i in range(50))  # expected 300


def test_sample_sessions_per_length_seeded():
    s = sample_sessions(POOLS, [2, 3, 4], per_length=3, seed=1)
    assert dict(s.group_by("sampled_length").len().iter_rows()) == {2: 3, 3: 3, 4: 1}  # only 1 four-turn exists
    assert s.filter(pl.col("sampled_length") == 4)["session_id"].item() == "L4:F1:a+b+c+d"
    assert set(s["combinations_available"]) == {9, 5, 1}
    assert s.equals(sample_sessions(POOLS, [2, 3, 4], per_length=3, seed=1))
    only2 = sample_sessions(POOLS, [2], per_length=3, seed=1)
    assert only2["session_id"].to_list() == s.filter(pl.col("sampled_length") == 2)["session_id"].to_list()
    seeds = {tuple(sample_sessions(POOLS, [2], 3, seed)["session_id"]) for seed in range(8)}
    assert len(seeds) > 1
    assert s["session_id"].n_unique() == s.height


def test_facet_pools_from_qa():
    qa = pl.DataFrame({"qa_id": ["F2/Q2", "F1/Q2", "F1/Q1"], "facet_id": ["F2", "F1", "F1"],
                       "question_id": ["Q2", "Q2", "Q1"]})
    assert facet_pools(qa) == [("F1", ["F1/Q1", "F1/Q2"]), ("F2", ["F2/Q2"])]


def test_cut_at_reveal():
    ids = ["a", "b", "c", "d"]
    assert cut_at_reveal(ids, [False, False, False, False]) == (ids, None)
    assert cut_at_reveal(ids, [None, None, None, True]) == (ids, None)  # revealed on the last turn: as designed
    assert cut_at_reveal(ids, [False, True, True, False]) == (["a", "b"], None)
    assert cut_at_reveal(ids, [False, None, True, False]) == (["a", "b", "c"], None)
    assert cut_at_reveal(ids, [True, False, False, False]) == (["a"], "facet revealed at turn 1")


def test_rewrite_stages():
    assert [rewrite_stage(t, 2) for t in (1, 2)] == ["conceal", "reveal"]
    assert [rewrite_stage(t, 4) for t in (1, 2, 3, 4)] == ["conceal", "hint", "hint", "reveal"]


def _qa():
    rows = {}
    for f, ids in POOLS:
        for i in ids:
            rows[i] = {"qa_id": i, "topic_id": "T", "facet_id": f, "facet_desc": f"desc {f}",
                       "initial_request": "req", "question_id": i.split("/")[1], "question": f"q {i}",
                       "answer": f"a {i}", "images": ["img.jpg"] if i == "F1/b" else []}
    return rows


def _ok(task, reply: dict) -> Outcome:
    """The outcome of a reply the task accepts."""
    text = json.dumps(reply)
    parsed = task.parse(text)
    assert parsed.status is Status.OK, parsed.error
    return Outcome(None, 0, Status.OK, parsed.value, None, text, "m", task.version)


def _failed(status: str) -> Outcome:
    return Outcome(None, 0, Status(status), None, "boom", "{}", "m", "v")


def test_refine_sessions_moves_drops_and_dedups():
    cands = pl.DataFrame([
        {"session_id": "L2:F1:a+b", "facet_id": "F1", "sampled_length": 2, "stream_index": 0, "qa_ids": ["F1/a", "F1/b"]},
        {"session_id": "L3:F1:a+b+c", "facet_id": "F1", "sampled_length": 3, "stream_index": 0,
         "qa_ids": ["F1/a", "F1/b", "F1/c"]},
        {"session_id": "L3:F1:a+c+d", "facet_id": "F1", "sampled_length": 3, "stream_index": 2,
         "qa_ids": ["F1/a", "F1/c", "F1/d"]},
        {"session_id": "L3:F2:e+f+g", "facet_id": "F2", "sampled_length": 3, "stream_index": 4,
         "qa_ids": ["F2/e", "F2/f", "F2/g"]},
        {"session_id": "L2:F2:f+g", "facet_id": "F2", "sampled_length": 2, "stream_index": 8, "qa_ids": ["F2/f", "F2/g"]},
    ]).with_columns(combinations_available=pl.lit(9), target_per_length=pl.lit(2))
    similar = {("F2/e", "F2/f"): _ok(SIMILAR, {"information": "same"})}
    revealed = {"F1/b": _ok(REVEALED, {"intention": "revealed"}), "F2/f": _ok(REVEALED, {"intention": "revealed"})}
    rewrites = {("F1/a", "conceal"): _ok(REWRITE["conceal"], {"answer": " hidden \n a"}),
                ("F1/c", "hint"): _failed("llm_error")}
    out = refine_sessions(cands, _qa(), similar, revealed, rewrites)
    rows = {r["session_id"]: r for r in out.iter_rows(named=True)}
    assert rows["L2:F1:a+b"]["kept"] and rows["L2:F1:a+b"]["cut_from"] is None
    # revealed at turn 2 of 3: cut to two turns, but L2:F1:a+b was sampled already -> duplicate
    assert rows["L3:F1:a+b+c"]["reject_reason"] == "duplicate of L2:F1:a+b after cut"
    assert rows["L3:F1:a+b+c"]["n_turns"] == 2 and rows["L3:F1:a+b+c"]["cut_from"] == 3
    assert rows["L3:F2:e+f+g"]["reject_reason"] == "similar QA pairs F2/e ~ F2/f"
    assert rows["L2:F2:f+g"]["reject_reason"] == "facet revealed at turn 1"
    # a failed rewrite keeps the session and the raw answer, and marks it
    kept = rows["L3:F1:a+c+d"]
    assert kept["kept"] and kept["status"] == "llm_error" and "boom" in kept["error"]
    assert [t["answer"] for t in kept["turns"]] == ["hidden a", "a F1/c", "a F1/d"]  # failed rewrite: raw answer
    assert [t["rewrite_status"] for t in kept["turns"]] == ["ok", "llm_error", None]
    assert [t["answer_raw"] for t in kept["turns"]] == ["a F1/a", "a F1/c", "a F1/d"]
    assert rows["L2:F1:a+b"]["has_images"] and rows["L2:F1:a+b"]["turns"][1]["images"] == ["img.jpg"]
    summary = length_summary(out, [2, 3])
    two = summary.filter(pl.col("n_turns") == 2).row(0, named=True)
    assert (two["sampled"], two["kept"], two["dropped"], two["shortfall"]) == (2, 1, 1, 1)
    three = summary.filter(pl.col("n_turns") == 3).row(0, named=True)
    assert (three["sampled"], three["kept"], three["cut_to_shorter"], three["dropped"]) == (3, 1, 1, 2)


def test_refine_moves_a_cut_session_to_the_shorter_length():
    cands = pl.DataFrame([{"session_id": "L3:F1:b+c+d", "facet_id": "F1", "sampled_length": 3, "stream_index": 0,
                           "qa_ids": ["F1/b", "F1/c", "F1/d"], "combinations_available": 4, "target_per_length": 1}])
    out = refine_sessions(cands, _qa(), {}, {"F1/c": _ok(REVEALED, {"intention": "revealed"})}, {}).row(0, named=True)
    assert out["kept"] and out["n_turns"] == 2 and out["cut_from"] == 3
    assert [t["qa_id"] for t in out["turns"]] == ["F1/b", "F1/c"]


def test_choice_statuses():
    ok = SIMILAR.parse('{"information": "Same"}')
    assert (ok.value.decision, ok.status) == (True, "ok")
    no = REVEALED.parse('{"intention": "not yet"}')
    assert (no.value.decision, no.status) == (False, "ok")
    bad = SIMILAR.parse('{"information": "perhaps"}')
    assert bad.status == "parse_error" and bad.value is None
    assert bad.error == "information 'perhaps' not in ['different', 'same']"
    req = SIMILAR.request({"question1": "q", "answer1": "a", "question2": "q2", "answer2": "a2"}, seed=0)
    [err] = SIMILAR.outcomes(None, req, ChatResult(texts=[""], error="Timeout"))
    assert err.status == "llm_error" and err.error == "Timeout"


def test_reply_schemas_are_the_old_hand_written_ones():
    """The schemas are part of the LLM cache key and the llama.cpp grammar: they must not drift."""
    def one(field, prop):
        return {"type": "object", "properties": {field: prop}, "required": [field]}

    assert SIMILAR.schema == one("information", {"type": "string", "enum": ["different", "same"]})
    assert REVEALED.schema == one("intention", {"type": "string", "enum": ["not yet", "revealed"]})
    for task in REWRITE.values():
        assert task.schema == one("answer", {"type": "string", "minLength": 2, "maxLength": 150})
    assert INFER.schema == one("query", {"type": "string", "minLength": 3, "maxLength": 100})
    req = rerank_step_request("q", "c", [("k1", ""), ("k2", "")], ["k1"], seed=3)
    assert req.json_schema == one("next", {"type": "string", "enum": ["k2"]})
    assert (req.sampling.temperature, req.sampling.max_tokens, req.sampling.seed) == (0.0, 48, 3)


def test_conservative_choice_comes_first():
    """A judge that always repeats the first option keeps sessions whole (no drop, no cut)."""
    assert SIMILAR.schema["properties"]["information"]["enum"][0] == "different"
    assert REVEALED.schema["properties"]["intention"]["enum"][0] == "not yet"
    assert not SIMILAR_CHOICES["different"] and not REVEALED_CHOICES["not yet"]


def test_inference_inputs_single_turn_is_the_first_turn():
    turns = [{"turn": 1, "question": "q1", "answer": "a1", "images": ["x.jpg"]},
             {"turn": 2, "question": "q2", "answer": "a2", "images": ["y.jpg"]}]
    sessions = pl.DataFrame([{"session_id": "s", "kept": True, "topic_id": "T", "facet_id": "F", "n_turns": 2,
                              "initial_request": "req", "turns": turns},
                             {"session_id": "r", "kept": False, "topic_id": "T", "facet_id": "F", "n_turns": 2,
                              "initial_request": "req", "turns": turns}])
    rows = inference_inputs(sessions, ["multi_turn", "single_turn"])
    assert rows["query_id"].to_list() == ["s|multi_turn", "s|single_turn"]
    assert rows["conversation"].to_list() == ["User: req\nSystem: q1\nUser: a1\nSystem: q2\nUser: a2",
                                              "User: req\nSystem: q1\nUser: a1"]
    assert rows["images"].to_list() == [["x.jpg", "y.jpg"], ["x.jpg"]]


# ----------------------------------------------------------------------------------------------- ranking

def test_bm25_ranks_by_term_overlap():
    idx = BM25Index(["d1", "d2", "d3"], ["giant teddy bear shop", "teddy bear history", "wash a bear"])
    hits = idx.search(["giant teddy", "the of and", "zebra"], k=10)
    assert [d for d, _ in hits[0]] == ["d1", "d2"] and hits[0][0][1] > hits[0][1][1] > 0
    assert hits[1] == [] and hits[2] == []  # stopwords only / unseen word: no hits, no zero-score padding


def test_dense_rerank_orders_by_cosine_stably():
    vecs = {"a": np.array([1.0, 0.0]), "b": np.array([0.0, 1.0]), "c": np.array([0.6, 0.8])}
    out = dense_rerank([np.array([0.0, 1.0]), np.array([1.0, 0.0])], [["a", "b", "c"], ["b", "c", "a"]], vecs)
    assert [d for d, _ in out[0]] == ["b", "c", "a"] and out[0][1][1] == pytest.approx(0.8)
    assert [d for d, _ in out[1]] == ["a", "c", "b"]
    assert dense_rerank([np.array([1.0, 0.0])], [[]], vecs) == [[]]


def test_keyword_ids_are_unique_and_non_redundant():
    ids = keyword_ids(["Giant teddy bears for sale in our teddy bear shop.",
                         "Giant teddy bears for sale in our teddy bear shop.",
                         "Wilson's disease is treated with chelation drugs such as penicillamine."], n_keywords=3)
    assert ids[1] == ids[0] + " #2" and len(set(ids)) == 3
    assert all(len(i.split(" #")[0].split(" | ")) <= 3 for i in ids)
    words = ids[0].split(" | ")
    assert not ("teddy bear" in words and "teddy bears" in words)  # a plural adds no new word


def test_next_id_schema_makes_unknown_and_repeated_ids_invalid():
    """The constraint each decoding step gets: exactly the candidates not ranked yet."""
    cands = [("red sofa | leather", "s1"), ("blue sofa | fabric", "s2"), ("velvet | cleaning", "s3")]
    req = rerank_step_request("leather sofa", "User: sofa", cands, chosen=["blue sofa | fabric"])
    schema = req.json_schema
    assert schema["properties"]["next"]["enum"] == ["red sofa | leather", "velvet | cleaning"]
    jsonschema.validate({"next": "velvet | cleaning"}, schema)
    for bad in ({"next": "blue sofa | fabric"}, {"next": "green sofa"}, {"next": "red sofa"}, {}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
    assert "[blue sofa | fabric]" in req.messages[-1]["content"]  # the prompt shows what is ranked already


def _chat_from(pick):
    def chat(role: str, reqs: list[ChatRequest]):
        assert role == "reranker"
        return [ChatResult(texts=[json.dumps({"next": pick(r.json_schema["properties"]["next"]["enum"])})], model="m")
                for r in reqs]
    return chat


def test_generative_rerank_with_a_constrained_backend_never_repeats():
    cands = [("k1", ""), ("k2", ""), ("k3", ""), ("k4", "")]
    task = GenerativeTask("q", "c", cands, ["d1", "d2", "d3", "d4"])
    # a backend that honours the schema and always takes the last allowed ID: the full list, reversed
    [res] = generative_rerank([task], _chat_from(lambda allowed: allowed[-1]))
    assert res.order == ["d4", "d3", "d2", "d1"] and res.generated == 4 and res.status == "ok"
    assert len(res.raw_outputs) == 3 and res.calls == 3  # the 4th rank is the one ID left: no call


def test_generative_rerank_flags_a_backend_that_ignores_the_constraint():
    """If a backend returned an ID outside the schema, the run says so and keeps the first-phase order."""
    cands = [("k1", ""), ("k2", ""), ("k3", "")]
    tasks = [GenerativeTask("q", "c", cands, ["d1", "d2", "d3"])]
    [res] = generative_rerank(tasks, _chat_from(lambda allowed: "k2"))  # repeats k2 at step 2
    assert res.status == "parse_error" and "'k2' is not an allowed candidate" in res.error
    assert res.order == ["d1", "d2", "d3"] and res.generated == 0 and res.fallback
    [res] = generative_rerank(tasks, lambda role, reqs: [ChatResult(texts=[""], error="down") for _ in reqs])
    assert res.status == "llm_error" and res.generated == 0 and res.order == ["d1", "d2", "d3"]


def test_multimodal_request_carries_image_parts(tmp_path):
    (tmp_path / "img.png").write_bytes(b"\x89PNG fake")
    part = image_part("img.png", tmp_path)
    assert part["image_url"]["url"].startswith("data:image/png;base64,")
    assert image_part("https://x/y.jpg", None)["image_url"]["url"] == "https://x/y.jpg"
    with pytest.raises(FileNotFoundError):
        image_part("missing.jpg", tmp_path)
    req = rerank_step_request("q", "c", [("k1", "")], [], images=[part])
    content = req.messages[-1]["content"]
    assert content[0]["type"] == "text" and content[1]["type"] == "image_url"


def test_run_rows_ranks_contiguous():
    rows = run_rows({"query_id": "q"}, [("d1", None, "generated"), ("d2", 1.5, "first_stage")], ["raw1"])
    assert [(r["rank"], r["doc_id"], r["raw_output"]) for r in rows] == [(1, "d1", "raw1"), (2, "d2", None)]


# ----------------------------------------------------------------------------------------------- metrics

def test_ranking_metrics_hand_computed():
    qrels = {"q1": {"d1": 1, "d3": 2}, "q2": {"d2": 1}, "q3": {"d9": 1}, "q4": {"d5": 1}}
    runs = {"q1": ["d1", "d2", "d3"], "q2": ["d1", "d2"], "q3": [], "q4": ["d6", "d7", "d8", "d9", "d5", "d4"]}
    m = {r["query_id"]: r for r in ranking_metrics(qrels, runs, ks=(1, 3, 5)).iter_rows(named=True)}
    # q1: first relevant at rank 1; 2 of top 3 relevant; DCG@3 = 1/log2(2) + 2/log2(4) = 2,
    #     IDCG@3 = 2/log2(2) + 1/log2(3); nDCG@1 = 1 / 2
    idcg = 2 + 1 / math.log2(3)
    assert (m["q1"]["mrr"], m["q1"]["p_at_1"], m["q1"]["p_at_3"], m["q1"]["p_at_5"]) == pytest.approx((1, 1, 2 / 3, 2 / 5))
    assert m["q1"]["ndcg_at_1"] == pytest.approx(0.5) and m["q1"]["ndcg_at_3"] == pytest.approx(2 / idcg)
    # q2: relevant at rank 2
    assert (m["q2"]["mrr"], m["q2"]["p_at_1"], m["q2"]["p_at_3"]) == pytest.approx((0.5, 0, 1 / 3))
    assert m["q2"]["ndcg_at_3"] == pytest.approx(1 / math.log2(3))
    # q3: empty ranking scores 0; q4: relevant at rank 5
    assert all(m["q3"][c] == 0 for c in m["q3"] if c != "query_id")
    assert (m["q4"]["mrr"], m["q4"]["p_at_3"], m["q4"]["p_at_5"]) == pytest.approx((0.2, 0, 0.2))
    assert m["q4"]["ndcg_at_5"] == pytest.approx(1 / math.log2(6)) and m["q4"]["ndcg_at_3"] == 0
    assert ranking_metrics({}, {}).height == 0
    assert ranking_metrics({"q": {"d": 1}}, {})["mrr"].to_list() == [0.0]


def test_evaluation_table_overall_by_turns_and_exclusions():
    runs = pl.DataFrame({
        "run_id": ["bm25/multi_turn/text_only"] * 3, "query_id": ["a|m", "a|m", "b|m"], "rank": [1, 2, 1],
        "doc_id": ["x", "y", "y"]})
    expected = pl.DataFrame({
        "run_id": ["bm25/multi_turn/text_only"] * 4, "ranker": ["bm25"] * 4, "input": ["multi_turn"] * 4,
        "modality": ["text_only"] * 4, "query_id": ["a|m", "b|m", "c|m", "d|m"], "facet_id": ["F1", "F1", "F1", "F2"],
        "n_turns": [2, 3, 3, 2], "status": ["ok", "ok", "ok", "ok"]})
    qrels = pl.DataFrame({"qid": ["F1", "F1", "F2"], "doc_id": ["y", "z", "q"], "rel": [1, 1, 0]})
    table, per_query = evaluation_table(runs, expected, qrels, [1, 3], ranking_metrics)
    overall = table.filter(pl.col("breakdown") == "overall").row(0, named=True)
    # a: y at rank 2 (RR .5); b: y at rank 1 (RR 1); c: empty ranking (0); d: facet F2 has no relevant doc: excluded
    assert (overall["n_queries"], overall["n_excluded"]) == (3, 1)
    assert overall["mrr"] == pytest.approx(0.5) and overall["p_at_1"] == pytest.approx(1 / 3)
    by = {r["n_turns"]: r for r in table.filter(pl.col("breakdown") == "by_turns").iter_rows(named=True)}
    assert by[2]["n_queries"] == 1 and by[2]["n_excluded"] == 1 and by[2]["mrr"] == pytest.approx(0.5)
    assert by[3]["n_queries"] == 2 and by[3]["mrr"] == pytest.approx(0.5)
    assert per_query.height == 3
    # failed_rerank=drop_query: a failed query is excluded, not scored 0
    failed = expected.with_columns(status=pl.when(pl.col("query_id") == "c|m").then(pl.lit("llm_error"))
                                   .otherwise(pl.col("status")))
    t2, _ = evaluation_table(runs, failed, qrels, [1], ranking_metrics, "drop_query")
    o2 = t2.filter(pl.col("breakdown") == "overall").row(0, named=True)
    assert (o2["n_queries"], o2["n_excluded"], o2["mrr"]) == (2, 2, pytest.approx(0.75))


def test_with_images_breakdown_compares_modalities_on_the_same_queries():
    """The multimodal run covers only queries with images; text_only is re-scored on exactly those."""
    inferred = pl.DataFrame({"query_id": ["a", "b", "c"], "input": ["multi_turn"] * 3, "facet_id": ["F"] * 3,
                             "n_turns": [2, 2, 3], "status": ["ok"] * 3, "images": [["a.jpg"], [], ["c.jpg"]]})
    gen_t, gen_m = "generative_rerank/multi_turn/text_only", "generative_rerank/multi_turn/multimodal"
    runs = pl.DataFrame({
        "run_id": [gen_t] * 6 + [gen_m] * 4,
        "ranker": ["generative_rerank"] * 10, "modality": ["text_only"] * 6 + ["multimodal"] * 4,
        "status": ["ok"] * 10, "query_id": ["a", "a", "b", "b", "c", "c", "a", "a", "c", "c"],
        "rank": [1, 2] * 5, "doc_id": ["x", "r", "r", "x", "x", "r", "r", "x", "r", "x"]})
    qrels = pl.DataFrame({"qid": ["F"], "doc_id": ["r"], "rel": [1]})
    exp = expected_queries(inferred, runs, ["generative_rerank"])
    assert dict(exp.select("query_id", "has_images").unique().iter_rows()) == {"a": True, "b": False, "c": True}
    table, _ = evaluation_table(runs, exp, qrels, [1], ranking_metrics)
    got = {(r["breakdown"], r["modality"]): (r["n_queries"], r["mrr"]) for r in table.iter_rows(named=True)
           if r["breakdown"] != "by_turns"}
    # text_only: a .5, b 1, c .5 -> overall 2/3; on the image subset {a, c}: .5. multimodal: a 1, c 1.
    assert got[("overall", "text_only")] == (3, pytest.approx(2 / 3))
    assert got[("with_images", "text_only")] == (2, pytest.approx(0.5))
    assert got[("overall", "multimodal")] == got[("with_images", "multimodal")] == (2, pytest.approx(1.0))
    assert table["breakdown"].to_list()[0] == "overall" and table["breakdown"].to_list()[-1] == "with_images"
    # without any multimodal run there is nothing to compare: no with_images rows
    t_only, _ = evaluation_table(runs.filter(pl.col("modality") == "text_only"),
                                   exp.filter(pl.col("modality") == "text_only"), qrels, [1], ranking_metrics)
    assert set(t_only["breakdown"]) == {"overall", "by_turns"}


def test_expected_queries_status_rules():
    inferred = pl.DataFrame({"query_id": ["s|multi_turn", "t|multi_turn"], "input": ["multi_turn"] * 2,
                             "facet_id": ["F"] * 2, "n_turns": [2, 2], "status": ["ok", "llm_error"],
                             "images": [["i.jpg"], []]})
    runs = pl.DataFrame({"run_id": ["generative_rerank/multi_turn/multimodal", "bm25/multi_turn/text_only"],
                         "query_id": ["s|multi_turn", "s|multi_turn"], "ranker": ["generative_rerank", "bm25"],
                         "modality": ["multimodal", "text_only"], "status": ["parse_error", "ok"]})
    exp = expected_queries(inferred, runs, ["bm25", "bm25_history", "generative_rerank"])
    got = {(r["run_id"], r["query_id"]): r["status"] for r in exp.iter_rows(named=True)}
    assert got[("bm25/multi_turn/text_only", "t|multi_turn")] == "input_error"       # its inferred query failed
    assert got[("bm25_history/multi_turn/text_only", "t|multi_turn")] == "ok"        # history needs no inference
    assert got[("generative_rerank/multi_turn/multimodal", "s|multi_turn")] == "parse_error"
    assert ("generative_rerank/multi_turn/multimodal", "t|multi_turn") not in got    # no images: not expected


# ----------------------------------------------------------------------------------------------- config

def test_retrieval_params_validated():
    assert parse_params({"retrieval": {"per_length": 5}}).retrieval.per_length == 5
    for bad, key in (({"turn_lengths": [1, 2]}, "turn_lengths"), ({"facet_split": [0.5, 0.1, 0.1]}, "facet_split"),
                     ({"rankers": ["bm26"]}, "rankers"), ({"per_lenght": 3}, "per_lenght")):
        with pytest.raises(ParamsError, match=key):
            parse_params({"retrieval": bad})
