"""Double-turn preferences: normalisation/EM, answer-set F1 (own-user rule), tie rule, leak filter, random
baseline, importers and quarantine, phi parsing, pair counting and TRL exports. Hand-computed values."""

import json
from pathlib import Path

import datasets
import polars as pl
import pytest

from dagster_project.config import DoubleTurnConfig
from dagster_project.core.double_turn.answers import ANSWER, answer_of, feasible_answers, top_k_answers
from dagster_project.core.double_turn.evaluation import extract_short_answer, parse_turn2, subject_reply_text, turn2_asks
from dagster_project.core.double_turn.exports import dpo_records, sft_exports, user_simulator_sft
from dagster_project.core.double_turn.metrics import (
    answer_set_f1,
    direct_answer_accuracy,
    exact_match,
    normalize_answer,
    random_decision_baseline,
)
from dagster_project.core.double_turn.preferences import label_pairs, prefer
from dagster_project.core.double_turn.qa import merge_interpretations, qa_tables, read_qa_file, select_queries
from dagster_project.core.double_turn.sft import clarify_sft
from dagster_project.core.double_turn.simulation import SIMULATE, leaks_answer, simulation_fields, simulation_values
from dagster_project.io.formats.ambigqa import read_ambigqa
from dagster_project.io.formats.nq_open import read_nq_open
from dagster_project.io.formats.qa_generic import read_generic
from dagster_project.io.records import InputFileError
from dagster_project.llm.chat import ChatRequest, ChatResult
from dagster_project.llm.task import Status

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
    assert prefer(cq, da, direct_wins_ties=True) == (da, "tie: direct answer preferred")
    assert prefer(da, cq, direct_wins_ties=True)[0] is da
    assert prefer(cq, da, direct_wins_ties=False) == (None, "tie")
    assert prefer(cq, _cand("c1", "clarify", 0.5), direct_wins_ties=True) == (None, "tie")
    better = _cand("c2", "clarify", 1.0)
    assert prefer(better, da, direct_wins_ties=True) == (better, "higher score")
    assert prefer(_cand("c3", "clarify", None), da, True) == (None, "unscored candidate")


def test_label_pairs_counts_n_choose_2():
    cands = pl.DataFrame([_cand("q:c0", "clarify", 1.0), _cand("q:c1", "clarify", 0.0),
                          _cand("q:c2", "clarify", 0.0), _cand("q:d", "direct", 0.0)])
    pairs = label_pairs(cands, "double_turn", direct_wins_ties=True)
    assert pairs.height == 6 and set(pairs["n_candidates"]) == {4}
    by = {(r["candidate_a"], r["candidate_b"]): (r["chosen_id"], r["reason"]) for r in pairs.iter_rows(named=True)}
    assert by[("q:c1", "q:c2")] == (None, "tie")
    assert by[("q:c1", "q:d")] == ("q:d", "tie: direct answer preferred")
    assert by[("q:c0", "q:d")] == ("q:c0", "higher score")
    assert int(pairs["kept"].sum()) == 5


# --------------------------------------------------------------------------- leak filter, user simulation

def test_leak_filter_whole_words_and_aliases():
    assert leaks_answer("I mean the one by James Cameron", ["James Cameron"])
    assert leaks_answer("the pacific, please", ["Pacific Ocean", "the Pacific"])
    assert not leaks_answer("the one from 1950", ["5"])  # not inside another number
    assert not leaks_answer("the newer film", ["James Cameron"])
    # punctuation glued to the answer still leaks it (SQuAD normalisation alone reads "camerons", "nilebased")
    assert leaks_answer("I mean James Cameron's film", ["James Cameron"])
    assert leaks_answer("the Nile-based one", ["Nile"])
    assert leaks_answer("the one in the U.S.", ["U.S."]) and leaks_answer("in the US", ["U.S."])
    assert leaks_answer("the 1990-91 season", ["1990"])  # "1990 91" contains the year as a word
    assert not leaks_answer("season 1990-91", ["91 season"])


def _simulated(result: ChatResult, aliases: list[str]) -> dict:
    item = {"question": "Who?", "clarifying_question": "Which one?", "expected_answer": aliases[0], "aliases": aliases}
    return simulation_fields(SIMULATE.outcomes(item, SIMULATE.request(simulation_values(item)), result)[0])


def test_parse_simulation_reasons():
    ok = _simulated(ChatResult(texts=['{"reply": "The 1997 film.", "abstain": false}']), ["James Cameron"])
    assert ok["abstained"] is False and ok["abstain_reason"] is None and ok["reply"] == "The 1997 film."
    leak = _simulated(ChatResult(texts=['{"reply": "James Cameron", "abstain": false}']), ["James Cameron"])
    assert leak["abstained"] and leak["abstain_reason"] == "leak" and leak["reply"] == "James Cameron"
    abst = _simulated(ChatResult(texts=['{"reply": "", "abstain": true}']), ["x"])
    assert abst["abstain_reason"] == "simulator_abstained" and abst["status"] == "ok"
    assert _simulated(ChatResult(texts=["{oops"]), ["x"])["abstain_reason"] == "parse_error"
    err = _simulated(ChatResult(error="boom"), ["x"])
    assert (err["abstain_reason"], err["status"]) == ("llm_error", "llm_error")
    # a reply is needed unless the user abstains, and must be text (the old hand-written checks, same words)
    assert _simulated(ChatResult(texts=['{"abstain": false}']), ["x"])["error"] == "missing field 'reply'"
    assert _simulated(ChatResult(texts=['{"reply": 3, "abstain": false}']), ["x"])["error"] == \
        "field 'reply' should be str, got int"
    assert _simulated(ChatResult(texts=['{"reply": " "}']), ["x"])["error"] == "field 'reply' is empty"
    assert _simulated(ChatResult(texts=['{"abstain": true}']), ["x"])["abstain_reason"] == "simulator_abstained"


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
    records, _ = read_ambigqa(DATA / "sample_ambigqa.json")
    a1 = next(r for r in records if r.id == "a1")
    # singleAnswer ["leonard cohen", "Cohen"] shares "leonard cohen" with the first qaPair: merged, not a 3rd reading
    assert merge_interpretations(a1.items) == [
        {"answers": ["Leonard Cohen", "Cohen"], "question": "Who first recorded Hallelujah?"},
        {"answers": ["Jeff Buckley", "Buckley"], "question": "Who sang the 1994 cover of Hallelujah?"}]
    a2 = next(r for r in records if r.id == "a2")
    assert merge_interpretations(a2.items) == [{"answers": ["Mary Shelley"], "question": None}]


def test_ambigqa_quarantine_names_record_and_field():
    records, rejected = read_ambigqa(DATA / "sample_ambigqa.json")
    assert len(records) + len(rejected) == 6 and len(records) == 2
    assert rejected.frame().columns == ["file", "record", "field", "reason", "raw"]
    # records are 1-based list positions (io.records); the raw record names its id
    rej = {r["record"]: (r["field"], next((i for i in ("a3", "a4", "a5") if f'"{i}"' in r["raw"]), None))
           for r in rejected.rows}
    assert rej == {3: ("annotations[0].qaPairs[1].answer", "a3"), 4: ("question", "a4"),
                   5: ("annotations[0]", "a5"), 6: ("<record>", None)}
    assert "twoAnswers" in next(r["reason"] for r in rejected.rows if r["record"] == 5)
    assert {r["file"] for r in rejected.rows} == {(DATA / "sample_ambigqa.json").as_posix()}


def test_merge_is_transitive():
    merged = merge_interpretations([(["Xa"], None), (["Yb"], "qb"), (["xa", "yb"], None), (["Zc"], None)])
    assert merged == [{"answers": ["Xa", "Yb"], "question": "qb"}, {"answers": ["Zc"], "question": None}]


def test_nq_open_each_answer_is_a_reading_unless_aliases():
    records, rejected = read_nq_open(DATA / "sample_nq_open.jsonl")
    wall = records[0]
    assert [i["answers"] for i in merge_interpretations(wall.items)] == \
        [["9 November 1989"], ["November 9, 1989"], ["1989"]]
    assert wall.id.startswith("nq-") and wall.record == 1
    ottawa = next(r for r in records if r.id == "nq-7")
    assert merge_interpretations(ottawa.items) == [{"answers": ["Ottawa"], "question": None}]  # "ottawa." is the same
    assert {(r["record"], r["field"]) for r in rejected.rows} == {(4, "answer"), (5, "<record>")}
    merged = read_nq_open(DATA / "sample_nq_open.jsonl", answers_are_aliases=True)[0][0]
    assert merge_interpretations(merged.items) == [{"answers": ["9 November 1989", "November 9, 1989", "1989"],
                                                   "question": None}]


def test_generic_csv_and_jsonl(tmp_path):
    records, rejected = read_generic(DATA / "sample_generic.csv")
    assert [r.id for r in records] == ["g1", "g2"]
    assert merge_interpretations(records[0].items)[1] == {"answers": ["Michael Keaton", "Keaton"],
                                                          "question": "Who played Batman in the 1989 film?"}
    # CSV records are data rows (io.records: the header is not a record): g3 is row 3, g4 row 4
    assert {(r["record"], r["field"], json.loads(r["raw"])["id"]) for r in rejected.rows} == \
        {(3, "answers", "g3"), (4, "disambiguated_questions", "g4")}
    p = tmp_path / "g.jsonl"
    p.write_text(json.dumps({"id": 5, "question": "q?", "answers": [["a"], ["b", "B2"]]}) + "\n")
    assert merge_interpretations(read_generic(p)[0][0].items)[1]["answers"] == ["b", "B2"]
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
    (tmp_path / "broken.json").write_text("[{")  # a broken item is quarantined, not a whole-file error
    records, q = read_ambigqa(tmp_path / "broken.json")
    assert records == [] and [r["reason"].split(":")[0] for r in q.rows] == ["invalid_json"]
    with pytest.raises(InputFileError, match="unknown format"):
        read_qa_file(tmp_path / "obj.json", "squad")


def test_qa_tables_reconcile_and_quarantine_duplicate_ids():
    a = read_qa_file(DATA / "sample_ambigqa.json", "ambigqa", "train")
    b = read_qa_file(DATA / "sample_ambigqa.json", "ambigqa", "eval")  # same ids again: all quarantined as duplicates
    qa, rej = qa_tables([a, b])
    assert qa["query_id"].to_list() == ["a1", "a2"] and qa["is_ambiguous"].to_list() == [True, False]
    assert len(rej) == 4 + 6
    assert rej.frame().filter(pl.col("reason").str.starts_with("duplicate id")).height == 2
    per_file = qa.group_by("source_file").agg(pl.len() + pl.col("file_rejected").max(), pl.col("file_records").max())
    assert per_file.row(0)[1] == per_file.row(0)[2] == 6


def test_select_queries_is_stratified_and_seeded():
    qa, _ = qa_tables([read_qa_file(DATA / "demo_ambigqa.json", "ambigqa", "both")])
    sel = select_queries(qa, 4, seed=3)
    train = sel.filter(pl.col("selected_train"))
    assert train.height == 4 and int(train["is_ambiguous"].sum()) == 2
    assert select_queries(qa, 4, seed=3).equals(sel)
    assert select_queries(qa, None, seed=0)["selected_eval"].all()
    only_train, _ = qa_tables([read_qa_file(DATA / "demo_ambigqa.json", "ambigqa", "train")])
    assert not select_queries(only_train, None, 0)["selected_eval"].any()


# --------------------------------------------------------------------------- answers, phi, top-k

def test_parse_answer_and_top_k():
    ok = ANSWER.parse('{"answer": "The answer is: Au"}')
    assert (answer_of(ok), ok.status, ok.error) == ("Au", Status.OK, None)
    assert ANSWER.parse('{"answer": "  "}').status is Status.PARSE_ERROR
    assert ANSWER.parse('{"answer": "Answer:"}').error == "empty answer"
    failed = ANSWER.outcomes({}, ANSWER.request({"examples": "", "question": "q?"}), ChatResult(error="boom"))[0]
    assert (answer_of(failed), failed.status, failed.error) == (None, Status.LLM_ERROR, "boom")
    assert top_k_answers(["y", "x", "X.", "z", "y", "x", None], 2) == ["x", "y"]  # x3, y2, z1
    assert top_k_answers(["x"], 3) == ["x"]  # fewer distinct answers than k


def test_phi_and_free_text_answers():
    assert parse_turn2("Clarifying Question: Which film?")["clarifying_question"] == "Which film?"
    assert parse_turn2("**clarifying question:** Which one?\nmore")["clarifying_question"] == "Which one?"
    assert parse_turn2("The clarifying question is: which?")["action"] == "clarify"
    assert parse_turn2("Clarifying Question:")["status"] == "parse_error"
    d = parse_turn2("The answer is James Cameron.\nHe also wrote it.")
    assert (d["action"], d["answer"]) == ("answer", "James Cameron")
    assert parse_turn2("")["status"] == "parse_error"
    assert extract_short_answer('Answer: "Ottawa".') == "Ottawa"


# --------------------------------------------------------------------------- TRL exports

def test_trl_exports_load_with_datasets(tmp_path):
    pairs = label_pairs(pl.DataFrame([_cand("q:c0", "clarify", 1.0), _cand("q:d", "direct", 0.5)]),
                           "double_turn", True)
    recs = dpo_records(pairs)
    assert recs == [{"prompt": [{"role": "user", "content": "x?"}], "chosen": [{"role": "assistant", "content": "q:c0"}],
                     "rejected": [{"role": "assistant", "content": "q:d"}]}]
    path = tmp_path / "dpo.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    ds = datasets.load_dataset("json", data_files=str(path), split="train")
    assert ds.column_names == ["prompt", "chosen", "rejected"] and ds[0]["chosen"][0]["role"] == "assistant"


def test_structured_subject_replies_become_protocol_text():
    assert subject_reply_text("clarify", '{"clarifying_question": "Which film?"}', "json") == \
        "Clarifying Question: Which film?"
    assert subject_reply_text("clarify", '{"clarifying_question": "Clarifying question: Which?"}', "json") == \
        "Clarifying question: Which?"  # already prefixed: not doubled
    assert subject_reply_text("clarify_or_direct", '{"action": "answer", "text": "Ottawa"}', "json") == "Ottawa"
    decided = subject_reply_text("clarify_or_direct", '{"action": "clarify", "text": "Which one?"}', "json")
    assert parse_turn2(decided)["clarifying_question"] == "Which one?"
    assert subject_reply_text("direct_greedy", "{broken", "json") == ""
    assert subject_reply_text("direct_greedy", "The answer is X", "free_text") == "The answer is X"
    cfg = DoubleTurnConfig(n_direct_samples=3, sample_temperature=1.0, seed=0, subject_max_tokens=16,
                           subject_output="json")
    reqs = [a.request for a in turn2_asks(pl.DataFrame({"query_id": ["q"], "question": ["x?"]}), cfg)]
    assert [r.json_schema is not None for r in reqs] == [True] * 4 and reqs[1].sampling.n == 3


# --------------------------------------------------------------------------- feasible answers, user-simulator SFT

def _qa_one(question="Who directed Titanic?", answers=(("James Cameron",), ("Jean Negulesco",))):
    return pl.DataFrame({"query_id": ["q1"], "question": [question], "is_ambiguous": [len(answers) > 1],
                         "n_interpretations": [len(answers)], "answers": [[list(a) for a in answers]],
                         "gold_answers": [[a[0] for a in answers]]})


class Replay:
    """A chat callable: the scripted results in order, every request kept."""

    def __init__(self, results: list[ChatResult]):
        self.results, self.requests = list(results), []

    def __call__(self, role: str, requests: list[ChatRequest]) -> list[ChatResult]:
        self.requests += requests
        out, self.results = self.results[:len(requests)], self.results[len(requests):]
        return out


def test_feasible_answers_dedup_filter_and_raw_outputs():
    qa = _qa_one()
    pool = [("q1", "x", "y"), ("q2", "Who wrote it?", "Me")]
    cfg = DoubleTurnConfig(rounds=2, n_shots=1, sample_temperature=1.0, seed=0, answer_max_tokens=16,
                           sft_min_answers=2)
    texts = ['{"answer": "James Cameron"}', '{"answer": "the james cameron."}', "{oops", '{"answer": "Negulesco"}']
    res = [ChatResult(texts=[t], model="m") for t in texts]
    chat = Replay(res)
    row = feasible_answers(chat, qa, pool, cfg).row(0, named=True)
    # per round (seed + round): greedy then sampled
    assert [(r.sampling.seed, r.sampling.temperature) for r in chat.requests] == [(0, 0.0), (0, 1.0), (1, 0.0), (1, 1.0)]
    # "the james cameron." normalises to the first answer; the broken reply is kept raw, not parsed
    assert row["y_model"] == ["James Cameron", "Negulesco"] and row["y_model_matches_gold"] == [True, False]
    # two distinct model answers, one matching gold: passes the filter and is an SFT query at min_answers=2, not 3
    assert row["model_filter_passed"] and row["filter_reason"] is None and row["sft_model"]
    cfg3 = cfg.model_copy(update={"sft_min_answers": 3})
    assert not feasible_answers(Replay(res), qa, pool, cfg3)["sft_model"].item()
    assert row["sample_statuses"] == ["ok", "ok", "parse_error", "ok"] and row["status"] == "ok"
    assert json.loads(row["raw_output"]) == texts == row["raw_outputs"]
    assert (row["model"], row["n_calls"]) == ("m", 4)
    miss = [ChatResult(texts=['{"answer": "Steven Spielberg"}'], model="m")] * 4
    row = feasible_answers(Replay(miss), qa, pool, cfg).row(0, named=True)
    assert not row["model_filter_passed"] and row["filter_reason"] == "no model answer matches any gold answer"


def _sft_frame(generator_reply: str, error: str | None = None) -> pl.DataFrame:
    feasible = pl.DataFrame({
        "query_id": ["q1"], "question": ["Who directed Titanic?"], "y_human": [["James Cameron", "Jean Negulesco"]],
        "y_human_aliases": [[["James Cameron"], ["Jean Negulesco"]]], "y_model": [[]],
        "sft_human": [True], "sft_model": [False]})
    return clarify_sft(Replay([ChatResult(texts=[generator_reply], error=error, model="g")]), feasible,
                       max_tokens=100)


def test_user_simulator_sft_matches_the_role_prompt_and_skips_leaks(tmp_path):
    three = pl.concat([
        _sft_frame(json.dumps({"clarifying_question": "Which film, 1997 or 1953?", "reply_1": "The 1997 one.",
                               "reply_2": "none"})),
        _sft_frame(json.dumps({"clarifying_question": "Which film?", "reply_1": "I mean James Cameron's",
                               "reply_2": "The older one"})).with_columns(pl.col("query_id") + "b"),
        _sft_frame("", error="boom"),
    ])
    recs = user_simulator_sft(three)
    # kept reply -> answer; "none" -> abstain; the leak (James Cameron) and the failed generator call are left out
    targets = [json.loads(r["messages"][-1]["content"]) for r in recs]
    assert targets == [{"reply": "The 1997 one.", "abstain": False}, {"reply": "", "abstain": True},
                       {"reply": "The older one", "abstain": False}]
    assert all(r["messages"][-1]["role"] == "assistant" for r in recs)
    # the prompt is exactly what the user_simulator role is sent, so a model trained on it fits the role
    item = {"question": "Who directed Titanic?", "clarifying_question": "Which film, 1997 or 1953?",
            "expected_answer": "Jean Negulesco"}
    assert recs[1]["messages"][:-1] == list(SIMULATE.request(simulation_values(item)).messages)
    assert sft_exports(three)["user_simulator_sft"] == recs
    path = tmp_path / "usim.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    ds = datasets.load_dataset("json", data_files=str(path), split="train")
    assert ds.num_rows == 3 and [m["role"] for m in ds[0]["messages"]] == ["system", "user", "assistant"]
