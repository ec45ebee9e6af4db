"""Double-turn preferences: normalisation/EM, answer-set F1 (own-user rule), tie rule, leak filter, random
baseline, importers and quarantine, phi parsing, pair counting and TRL exports. Hand-computed values."""

import json
from pathlib import Path

import datasets
import polars as pl
import pytest

from dagster_project.core import double_turn as dt
from dagster_project.llm.chat import ChatResult
from dagster_project.core.double_turn.metrics import answer_set_f1, direct_answer_accuracy, exact_match, normalize_answer, random_decision_baseline
from dagster_project.core.double_turn.qa_import import (InputFileError, merge_interpretations, qa_tables, read_ambigqa,
                                            read_generic, read_input, read_nq_open, select_queries)

DATA = Path(__file__).resolve().parents[2] / "data" / "double_turn"


# --------------------------------------------------------------------------- normalisation and EM

def test_normalize_answer_squad_style():
    assert normalize_answer("The  Pacific Ocean.") == "pacific ocean"
    assert normalize_answer("An Apple, a day!") == "apple day"
    assert normalize_answer("Theresa") == "theresa"  # 'the' only as a whole word
    assert normalize_answer(None) == ""


def test_exact_match_with_aliases():
    assert exact_match("the nile", ["Nile River", "Nile"])
    assert exact_match("JFK.", ["John F. Kennedy", "jfk"])
    assert not exact_match("Nile River basin", ["Nile River", "Nile"])
    assert not exact_match("the", ["The"])  # nothing left after normalisation never matches
    assert not exact_match(None, ["x"])


# --------------------------------------------------------------------------- answer-set F1

def test_f1_direct_answer_against_two_readings():
    # one correct answer out of two gold readings: P = 1, R = 1/2, F1 = 2/3
    assert answer_set_f1(["James Cameron"], [["James Cameron"], ["Jean Negulesco"]])["f1"] == pytest.approx(2 / 3)
    assert answer_set_f1(["Steven Spielberg"], [["James Cameron"], ["Jean Negulesco"]])["f1"] == 0.0


def test_f1_set_semantics_and_one_to_one_matching():
    gold = [["Nile", "Nile River"], ["Amazon"], ["Yangtze"]]
    # "nile." duplicates "Nile"; two aliases of one reading are credited once: matched 2 of |R| = 3 distinct
    r = answer_set_f1(["Nile", "nile.", "Nile River", "Amazon"], gold)
    assert r["precision"] == pytest.approx(2 / 3) and r["recall"] == pytest.approx(2 / 3)
    assert r["f1"] == pytest.approx(2 / 3)
    assert answer_set_f1([None], gold)["f1"] == 0.0


def test_f1_own_user_rule_for_clarify_systems():
    gold = [["Leonard Cohen"], ["Jeff Buckley"]]
    # both answers are in the gold set, but swapped between the users: neither counts
    swapped = answer_set_f1(["Jeff Buckley", "Leonard Cohen"], gold, owners=[0, 1])
    assert swapped["f1"] == 0.0
    assert answer_set_f1(["Jeff Buckley", "Leonard Cohen"], gold)["f1"] == 1.0  # without the rule: perfect
    # user 1 abstained (None counts as a wrong prediction): P = 1/2, R = 1/2
    half = answer_set_f1(["Leonard Cohen", None], gold, owners=[0, 1])
    assert (half["precision"], half["recall"], half["f1"]) == (0.5, 0.5, 0.5)
    with pytest.raises(ValueError):
        answer_set_f1(["a"], gold, owners=[0, 1])
    with pytest.raises(ValueError):
        answer_set_f1(["a"], [])


# --------------------------------------------------------------------------- tie rule, pairs

def _cand(cid, kind, score):
    return {"candidate_id": cid, "kind": kind, "score": score, "text": cid, "question": "x?", "query_id": "q"}


def test_tie_rule_prefers_direct_answer():
    cq, da = _cand("c0", "clarify", 0.5), _cand("d", "direct", 0.5)
    assert dt.prefer(cq, da, direct_wins_ties=True) == (da, "tie: direct answer preferred")
    assert dt.prefer(da, cq, direct_wins_ties=True)[0] is da
    assert dt.prefer(cq, da, direct_wins_ties=False) == (None, "tie")
    assert dt.prefer(cq, _cand("c1", "clarify", 0.5), direct_wins_ties=True) == (None, "tie")
    better = _cand("c2", "clarify", 1.0)
    assert dt.prefer(better, da, direct_wins_ties=True) == (better, "higher score")
    assert dt.prefer(_cand("c3", "clarify", None), da, True) == (None, "unscored candidate")


def test_label_pairs_counts_n_choose_2():
    cands = pl.DataFrame([_cand("q:c0", "clarify", 1.0), _cand("q:c1", "clarify", 0.0),
                          _cand("q:c2", "clarify", 0.0), _cand("q:d", "direct", 0.0)])
    pairs = dt.label_pairs(cands, "double_turn", direct_wins_ties=True)
    assert pairs.height == 6 and set(pairs["n_candidates"]) == {4}
    by = {(r["candidate_a"], r["candidate_b"]): (r["chosen_id"], r["reason"]) for r in pairs.iter_rows(named=True)}
    assert by[("q:c1", "q:c2")] == (None, "tie")
    assert by[("q:c1", "q:d")] == ("q:d", "tie: direct answer preferred")
    assert by[("q:c0", "q:d")] == ("q:c0", "higher score")
    assert int(pairs["kept"].sum()) == 5


# --------------------------------------------------------------------------- leak filter, user simulation

def test_leak_filter_whole_words_and_aliases():
    assert dt.leaks_answer("I mean the one by James Cameron", ["James Cameron"])
    assert dt.leaks_answer("the pacific, please", ["Pacific Ocean", "the Pacific"])
    assert not dt.leaks_answer("the one from 1950", ["5"])  # not inside another number
    assert not dt.leaks_answer("the newer film", ["James Cameron"])
    # punctuation glued to the answer still leaks it (SQuAD normalisation alone reads "camerons", "nilebased")
    assert dt.leaks_answer("I mean James Cameron's film", ["James Cameron"])
    assert dt.leaks_answer("the Nile-based one", ["Nile"])
    assert dt.leaks_answer("the one in the U.S.", ["U.S."]) and dt.leaks_answer("in the US", ["U.S."])
    assert dt.leaks_answer("the 1990-91 season", ["1990"])  # "1990 91" contains the year as a word
    assert not dt.leaks_answer("season 1990-91", ["91 season"])


def test_parse_simulation_reasons():
    ok = dt.parse_simulation(ChatResult(texts=['{"reply": "The 1997 film.", "abstain": false}']), ["James Cameron"])
    assert ok["abstained"] is False and ok["abstain_reason"] is None and ok["reply"] == "The 1997 film."
    leak = dt.parse_simulation(ChatResult(texts=['{"reply": "James Cameron", "abstain": false}']), ["James Cameron"])
    assert leak["abstained"] and leak["abstain_reason"] == "leak" and leak["reply"] == "James Cameron"
    abst = dt.parse_simulation(ChatResult(texts=['{"reply": "", "abstain": true}']), ["x"])
    assert abst["abstain_reason"] == "simulator_abstained" and abst["status"] == "ok"
    assert dt.parse_simulation(ChatResult(texts=["{oops"]), ["x"])["abstain_reason"] == "parse_error"
    err = dt.parse_simulation(ChatResult(error="boom"), ["x"])
    assert (err["abstain_reason"], err["status"]) == ("llm_error", "llm_error")


# --------------------------------------------------------------------------- random baseline, DA accuracy

def test_direct_answer_accuracy():
    assert direct_answer_accuracy([True, False, True, False], [True, True, False, False]) == 0.5
    with pytest.raises(ValueError):
        direct_answer_accuracy([], [])


def test_random_baseline_extremes_are_exact():
    fd, fc, should = [1.0, 0.0, 0.5], [0.0, 1.0, 1.0], [True, False, False]
    none = random_decision_baseline(fd, fc, should, da_rate=0.0, repeats=5, seed=1)
    assert none["f1"] == pytest.approx(2 / 3) and none["da_accuracy"] == pytest.approx(2 / 3)
    every = random_decision_baseline(fd, fc, should, da_rate=1.0, repeats=5, seed=1)
    assert every["f1"] == pytest.approx(0.5) and every["da_accuracy"] == pytest.approx(1 / 3)


def test_random_baseline_averages_draws_and_is_seeded():
    # answer 1 of 2 queries directly: drawing q0 gives mean F1 (1 + 0) / 2 and DA acc 1; drawing q1 gives 0 and 0
    fd, fc, should = [1.0, 0.0], [0.0, 0.0], [True, False]
    a = random_decision_baseline(fd, fc, should, da_rate=0.5, repeats=4000, seed=7)
    assert a["f1"] == pytest.approx(0.25, abs=0.02) and a["da_accuracy"] == pytest.approx(0.5, abs=0.03)
    assert a["per_query_f1"][1] == 0.0 and a["per_query_f1"][0] == pytest.approx(2 * a["f1"])
    assert random_decision_baseline(fd, fc, should, 0.5, 50, seed=7) == random_decision_baseline(fd, fc, should, 0.5, 50, seed=7)


# --------------------------------------------------------------------------- importers

def test_ambigqa_both_annotation_types_and_merging():
    res = read_ambigqa(DATA / "sample_ambigqa.json")
    a1 = next(r for r in res.records if r["query_id"] == "a1")
    # singleAnswer ["leonard cohen", "Cohen"] shares "leonard cohen" with the first qaPair: merged, not a 3rd reading
    assert a1["interpretations"] == [
        {"answers": ["Leonard Cohen", "Cohen"], "question": "Who first recorded Hallelujah?"},
        {"answers": ["Jeff Buckley", "Buckley"], "question": "Who sang the 1994 cover of Hallelujah?"}]
    a2 = next(r for r in res.records if r["query_id"] == "a2")
    assert a2["interpretations"] == [{"answers": ["Mary Shelley"], "question": None}]


def test_ambigqa_quarantine_names_record_and_field():
    res = read_ambigqa(DATA / "sample_ambigqa.json")
    assert res.n_read == 6 and len(res.records) == 2
    rej = {r["record"]: (r["record_id"], r["field"]) for r in res.rejected}
    assert rej == {2: ("a3", "annotations[0].qaPairs[1].answer"), 3: ("a4", "question"),
                   4: ("a5", "annotations[0]"), 5: (None, "<record>")}
    assert "twoAnswers" in next(r["reason"] for r in res.rejected if r["record"] == 4)


def test_merge_is_transitive():
    merged = merge_interpretations([(["Xa"], None), (["Yb"], "qb"), (["xa", "yb"], None), (["Zc"], None)])
    assert merged == [{"answers": ["Xa", "Yb"], "question": "qb"}, {"answers": ["Zc"], "question": None}]


def test_nq_open_each_answer_is_a_reading_unless_aliases():
    res = read_nq_open(DATA / "sample_nq_open.jsonl")
    wall = res.records[0]
    assert [i["answers"] for i in wall["interpretations"]] == [["9 November 1989"], ["November 9, 1989"], ["1989"]]
    assert wall["query_id"].startswith("nq-") and wall["record"] == 1
    ottawa = next(r for r in res.records if r["query_id"] == "nq-7")
    assert ottawa["interpretations"] == [{"answers": ["Ottawa"], "question": None}]  # "ottawa." is the same answer
    assert {(r["record"], r["field"]) for r in res.rejected} == {(4, "answer"), (5, "<line>")}
    merged = read_nq_open(DATA / "sample_nq_open.jsonl", answers_are_aliases=True).records[0]
    assert merged["interpretations"] == [{"answers": ["9 November 1989", "November 9, 1989", "1989"],
                                          "question": None}]


def test_generic_csv_and_jsonl(tmp_path):
    res = read_generic(DATA / "sample_generic.csv")
    assert [r["query_id"] for r in res.records] == ["g1", "g2"]
    assert res.records[0]["interpretations"][1] == {"answers": ["Michael Keaton", "Keaton"],
                                                    "question": "Who played Batman in the 1989 film?"}
    assert {(r["record_id"], r["field"]) for r in res.rejected} == {("g3", "answers"), ("g4", "disambiguated_questions")}
    p = tmp_path / "g.jsonl"
    p.write_text(json.dumps({"id": 5, "question": "q?", "answers": [["a"], ["b", "B2"]]}) + "\n")
    assert read_generic(p).records[0]["interpretations"][1]["answers"] == ["b", "B2"]
    bad = tmp_path / "bad.csv"
    bad.write_text("id,question\n1,x\n")
    with pytest.raises(InputFileError, match="lacks column"):
        read_generic(bad)


def test_whole_file_errors_name_the_file(tmp_path):
    with pytest.raises(InputFileError, match="nope.json: file not found"):
        read_ambigqa(tmp_path / "nope.json")
    (tmp_path / "obj.json").write_text('{"id": 1}')
    with pytest.raises(InputFileError, match="obj.json: top level must be a JSON list"):
        read_ambigqa(tmp_path / "obj.json")
    (tmp_path / "broken.json").write_text("[{")
    with pytest.raises(InputFileError, match="broken.json: not valid JSON"):
        read_ambigqa(tmp_path / "broken.json")
    with pytest.raises(InputFileError, match="unknown format"):
        read_input(tmp_path / "obj.json", "squad")


def test_qa_tables_reconcile_and_quarantine_duplicate_ids():
    a = read_ambigqa(DATA / "sample_ambigqa.json")
    b = read_ambigqa(DATA / "sample_ambigqa.json")  # same ids again: all quarantined as duplicates
    qa, rej = qa_tables([(a, "train"), (b, "eval")])
    assert qa["query_id"].to_list() == ["a1", "a2"] and qa["is_ambiguous"].to_list() == [True, False]
    assert rej.height == 4 + 6
    assert rej.filter(pl.col("reason").str.starts_with("duplicate id")).height == 2
    per_file = qa.group_by("source_file").agg(pl.len() + pl.col("file_rejected").max(), pl.col("file_records").max())
    assert per_file.row(0)[1] == per_file.row(0)[2] == 6


def test_select_queries_is_stratified_and_seeded():
    res = read_ambigqa(DATA / "demo_ambigqa.json")
    qa, _ = qa_tables([(res, "both")])
    sel = select_queries(qa, 4, seed=3)
    train = sel.filter(pl.col("selected_train"))
    assert train.height == 4 and int(train["is_ambiguous"].sum()) == 2
    assert select_queries(qa, 4, seed=3).equals(sel)
    assert select_queries(qa, None, seed=0)["selected_eval"].all()
    only_train, _ = qa_tables([(res, "train")])
    assert not select_queries(only_train, None, 0)["selected_eval"].any()


# --------------------------------------------------------------------------- answers, phi, top-k

def test_parse_answer_and_top_k():
    assert dt.parse_answer('{"answer": "The answer is: Au"}') == ("Au", "ok", None)
    assert dt.parse_answer('{"answer": "  "}')[1] == "parse_error"
    assert dt.parse_answer("", "boom") == (None, "llm_error", "boom")
    assert dt.top_k_answers(["y", "x", "X.", "z", "y", "x", None], 2) == ["x", "y"]  # x3, y2, z1
    assert dt.top_k_answers(["x"], 3) == ["x"]  # fewer distinct answers than k


def test_phi_and_free_text_answers():
    assert dt.parse_turn2("Clarifying Question: Which film?")["clarifying_question"] == "Which film?"
    assert dt.parse_turn2("**clarifying question:** Which one?\nmore")["clarifying_question"] == "Which one?"
    assert dt.parse_turn2("The clarifying question is: which?")["action"] == "clarify"
    assert dt.parse_turn2("Clarifying Question:")["status"] == "parse_error"
    d = dt.parse_turn2("The answer is James Cameron.\nHe also wrote it.")
    assert (d["action"], d["answer"]) == ("answer", "James Cameron")
    assert dt.parse_turn2("")["status"] == "parse_error"
    assert dt.extract_short_answer('Answer: "Ottawa".') == "Ottawa"


# --------------------------------------------------------------------------- TRL exports

def test_trl_exports_load_with_datasets(tmp_path):
    pairs = dt.label_pairs(pl.DataFrame([_cand("q:c0", "clarify", 1.0), _cand("q:d", "direct", 0.5)]),
                           "double_turn", True)
    recs = dt.dpo_records(pairs)
    assert recs == [{"prompt": [{"role": "user", "content": "x?"}], "chosen": [{"role": "assistant", "content": "q:c0"}],
                     "rejected": [{"role": "assistant", "content": "q:d"}]}]
    path = tmp_path / "dpo.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    ds = datasets.load_dataset("json", data_files=str(path), split="train")
    assert ds.column_names == ["prompt", "chosen", "rejected"] and ds[0]["chosen"][0]["role"] == "assistant"


def test_structured_subject_replies_become_protocol_text():
    assert dt.subject_reply_text("clarify", '{"clarifying_question": "Which film?"}', "json") == \
        "Clarifying Question: Which film?"
    assert dt.subject_reply_text("clarify", '{"clarifying_question": "Clarifying question: Which?"}', "json") == \
        "Clarifying question: Which?"  # already prefixed: not doubled
    assert dt.subject_reply_text("clarify_or_direct", '{"action": "answer", "text": "Ottawa"}', "json") == "Ottawa"
    decided = dt.subject_reply_text("clarify_or_direct", '{"action": "clarify", "text": "Which one?"}', "json")
    assert dt.parse_turn2(decided)["clarifying_question"] == "Which one?"
    assert dt.subject_reply_text("direct_greedy", "{broken", "json") == ""
    assert dt.subject_reply_text("direct_greedy", "The answer is X", "free_text") == "The answer is X"
    _, reqs = dt.subject_requests(pl.DataFrame({"query_id": ["q"], "question": ["x?"]}), 3, 1.0, 0, 16, "json")
    assert [r.json_schema is not None for r in reqs] == [True] * 4 and reqs[1].sampling.n == 3


# --------------------------------------------------------------------------- feasible answers, user-simulator SFT

def _qa_one(question="Who directed Titanic?", answers=(("James Cameron",), ("Jean Negulesco",))):
    return pl.DataFrame({"query_id": ["q1"], "question": [question], "is_ambiguous": [len(answers) > 1],
                         "n_interpretations": [len(answers)], "answers": [[list(a) for a in answers]],
                         "gold_answers": [[a[0] for a in answers]]})


def test_feasible_answers_dedup_filter_and_raw_outputs():
    qa = _qa_one()
    plan, reqs = dt.feasible_answer_requests(qa, [("q1", "x", "y"), ("q2", "Who wrote it?", "Me")], rounds=2,
                                             n_shots=1, temperature=1.0, seed=0, max_tokens=16)
    assert [(p["round"], p["decoding"]) for p in plan] == [(0, "greedy"), (0, "sampled"), (1, "greedy"), (1, "sampled")]
    assert [r.sampling.temperature for r in reqs] == [0.0, 1.0, 0.0, 1.0]
    texts = ['{"answer": "James Cameron"}', '{"answer": "the james cameron."}', "{oops", '{"answer": "Negulesco"}']
    res = [ChatResult(texts=[t], model="m") for t in texts]
    row = dt.build_feasible_answers(qa, plan, reqs, res, min_answers=2).row(0, named=True)
    # "the james cameron." normalises to the first answer; the broken reply is kept raw, not parsed
    assert row["y_model"] == ["James Cameron", "Negulesco"] and row["y_model_matches_gold"] == [True, False]
    # two distinct model answers, one matching gold: passes the filter and is an SFT query at min_answers=2, not 3
    assert row["model_filter_passed"] and row["filter_reason"] is None and row["sft_model"]
    assert not dt.build_feasible_answers(qa, plan, reqs, res, min_answers=3)["sft_model"].item()
    assert row["sample_statuses"] == ["ok", "ok", "parse_error", "ok"] and row["status"] == "ok"
    assert json.loads(row["raw_output"]) == texts == row["raw_outputs"]
    assert (row["model"], row["n_calls"]) == ("m", 4)
    miss = [ChatResult(texts=['{"answer": "Steven Spielberg"}'], model="m")] * 4
    row = dt.build_feasible_answers(qa, plan, reqs, miss, min_answers=2).row(0, named=True)
    assert not row["model_filter_passed"] and row["filter_reason"] == "no model answer matches any gold answer"


def _sft_frame(generator_reply: str, error: str | None = None) -> pl.DataFrame:
    plan, reqs = dt.sft_requests(pl.DataFrame({
        "query_id": ["q1"], "question": ["Who directed Titanic?"], "y_human": [["James Cameron", "Jean Negulesco"]],
        "y_human_aliases": [[["James Cameron"], ["Jean Negulesco"]]], "y_model": [[]],
        "sft_human": [True], "sft_model": [False]}), max_tokens=100)
    return dt.build_clarify_sft(plan, reqs, [ChatResult(texts=[generator_reply], error=error, model="g")])


def test_user_simulator_sft_matches_the_role_prompt_and_skips_leaks(tmp_path):
    three = pl.concat([
        _sft_frame(json.dumps({"clarifying_question": "Which film, 1997 or 1953?", "reply_1": "The 1997 one.",
                               "reply_2": "none"})),
        _sft_frame(json.dumps({"clarifying_question": "Which film?", "reply_1": "I mean James Cameron's",
                               "reply_2": "The older one"})).with_columns(pl.col("query_id") + "b"),
        _sft_frame("", error="boom"),
    ])
    recs = dt.user_simulator_sft(three)
    # kept reply -> answer; "none" -> abstain; the leak (James Cameron) and the failed generator call are left out
    targets = [json.loads(r["messages"][-1]["content"]) for r in recs]
    assert targets == [{"reply": "The 1997 one.", "abstain": False}, {"reply": "", "abstain": True},
                       {"reply": "The older one", "abstain": False}]
    assert all(r["messages"][-1]["role"] == "assistant" for r in recs)
    # the prompt is exactly what the user_simulator role is sent, so a model trained on it fits the role
    item = {"question": "Who directed Titanic?", "clarifying_question": "Which film, 1997 or 1953?",
            "expected_answer": "Jean Negulesco"}
    assert recs[1]["messages"][:-1] == list(dt.simulation_requests([item])[0].messages)
    assert dt.sft_exports(three)["user_simulator_sft"] == recs
    path = tmp_path / "usim.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    ds = datasets.load_dataset("json", data_files=str(path), split="train")
    assert ds.num_rows == 3 and [m["role"] for m in ds[0]["messages"]] == ["system", "user", "assistant"]
