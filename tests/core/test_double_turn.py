"""Double-turn preferences: normalisation/EM, answer-set F1 (own-user rule), tie rule, leak filter, random
baseline, importers and quarantine, phi parsing, pair counting and TRL exports. Hand-computed values."""

import json
from pathlib import Path

import datasets
import polars as pl
import pytest

from dagster_project.config import DoubleTurnConfig, LLMConfig, RoleConfig
from dagster_project.core.double_turn.answer_set import answer_set_table
from dagster_project.core.double_turn.answers import (
    ANSWER,
    ANSWER_AFTER,
    answer_of,
    completion_answer,
    feasible_answers,
    shot_pool,
    top_k_answers,
)
from dagster_project.core.double_turn.evaluation import (
    eval_interactions,
    extract_short_answer,
    parse_turn2,
    subject_reply_text,
    turn2_asks,
)
from dagster_project.core.double_turn.exports import (
    dpo_records,
    sft_exports,
    user_simulator_sft,
)
from dagster_project.core.double_turn.metrics import (
    direct_answer_accuracy,
    exact_match,
    normalize_answer,
    paired_bootstrap_p,
    paper_answer_set_f1,
    paper_clarify_f1,
    paper_user_correct,
    random_decision_baseline,
)
from dagster_project.core.double_turn.preferences import label_pairs, prefer
from dagster_project.core.double_turn.qa import (
    merge_interpretations,
    qa_tables,
    read_qa_file,
    select_queries,
)
from dagster_project.core.double_turn.sft import clarify_sft
from dagster_project.core.double_turn.simulation import (
    SIMULATE,
    leaks_answer,
    simulation_fields,
    simulation_values,
    user_simulations,
)
from dagster_project.core.double_turn.split import assign_use, train_eval_overlap
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
    # one correct answer out of two gold strings: P = 1, R = 1/2, F1 = 2/3
    assert paper_answer_set_f1(["James Cameron"], ["James Cameron", "Jean Negulesco"])["f1"] == pytest.approx(2 / 3)
    assert paper_answer_set_f1(["Steven Spielberg"], ["James Cameron", "Jean Negulesco"])["f1"] == 0.0


def test_f1_set_semantics_of_the_paper():
    gold = ["Nile", "Amazon", "Yangtze"]
    # 4 predictions, distinct normalised matches {nile, amazon} = 2: P = 2/4, R = 2/3, F1 = 4/7
    r = paper_answer_set_f1(["Nile", "nile.", "Nile River", "Amazon"], gold)
    assert (r["precision"], r["recall"]) == (pytest.approx(1 / 2), pytest.approx(2 / 3))
    assert r["f1"] == pytest.approx(4 / 7)
    assert paper_answer_set_f1([None], gold)["f1"] == 0.0
    with pytest.raises(ValueError):
        paper_answer_set_f1(["a"], [])


def test_f1_own_user_rule_for_clarify_systems():
    gold = ["Leonard Cohen", "Jeff Buckley"]
    # both answers are in the gold set, but swapped between the users: neither counts
    swapped = [paper_user_correct(p, g, "the older one", "Which version?") for p, g in
               zip(["Jeff Buckley", "Leonard Cohen"], gold)]
    assert paper_clarify_f1(swapped)["f1"] == 0.0
    assert paper_answer_set_f1(["Jeff Buckley", "Leonard Cohen"], gold)["f1"] == 1.0  # as a direct set: perfect
    # user 1 got no final answer (None is wrong): 1 of 2 users
    half = [paper_user_correct("Leonard Cohen", gold[0], "the 1984 one", "Which?"),
            paper_user_correct(None, gold[1], "the 1994 one", "Which?")]
    assert paper_clarify_f1(half) == {"precision": 0.5, "recall": 0.5, "f1": 0.5}
    with pytest.raises(ValueError):
        paper_clarify_f1([])


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


def test_select_queries_is_stratified_seeded_and_disjoint():
    qa, _ = qa_tables([read_qa_file(DATA / "demo_ambigqa.json", "ambigqa", "both")])
    qa = assign_use(qa, seed=3, eval_fraction=0.5)
    sel = select_queries(qa, 4, seed=3)
    train = sel.filter(pl.col("selected_train"))
    assert train.height == 4 and int(train["is_ambiguous"].sum()) == 2
    assert select_queries(qa, 4, seed=3).equals(sel)
    every = select_queries(qa, None, seed=0)
    # one query never serves training and evaluation (the old `both` selected every query for both)
    assert not (every["selected_train"] & every["selected_eval"]).any()
    assert (every["selected_train"] | every["selected_eval"]).all()
    assert every.filter(pl.col("selected_eval"))["use"].to_list() == ["eval"] * int(every["selected_eval"].sum())
    only_train, _ = qa_tables([read_qa_file(DATA / "demo_ambigqa.json", "ambigqa", "train")])
    assert not select_queries(assign_use(only_train, 0, 0.5), None, 0)["selected_eval"].any()


def test_use_depends_only_on_seed_and_id():
    qa, _ = qa_tables([read_qa_file(DATA / "demo_ambigqa.json", "ambigqa", "both")])
    full = assign_use(qa, seed=0, eval_fraction=0.5)
    part = assign_use(qa.tail(3), seed=0, eval_fraction=0.5)  # another file list: the same query keeps its use
    assert full.tail(3)["use"].to_list() == part["use"].to_list()
    assert set(full["use"]) == {"train", "eval"}
    assert assign_use(qa, seed=0, eval_fraction=0.5).equals(full)


def test_shot_pool_never_holds_evaluation_queries():
    qa = pl.DataFrame({"query_id": ["t1", "e1"], "question": ["Train q?", "Eval q?"], "use": ["train", "eval"],
                       "gold_answers": [["T"], ["E"]]})
    assert shot_pool(qa) == [("t1", "Train q?", "T")]


def test_overlap_check_finds_an_injected_leak():
    ev = pl.DataFrame({"query_id": ["e1"], "question": ["Who wrote Hamlet?"]})
    train = pl.DataFrame({"query_id": ["t1"], "question": ["Who painted the Mona Lisa?"]})
    clean = {"clarify_sft": [{"messages": [{"role": "user", "content": "Who painted the Mona Lisa?"}]}]}
    assert train_eval_overlap({"clarify_sft": train}, clean, ev).height == 0
    # an evaluation query in a training table: by id or by question
    by_id = train_eval_overlap({"t": pl.DataFrame({"query_id": ["e1"], "question": ["x?"]})}, {}, ev)
    assert by_id["reason"].to_list() == ["evaluation query id"]
    by_q = train_eval_overlap({"t": pl.DataFrame({"query_id": ["t9"], "question": ["who wrote hamlet"]})}, {}, ev)
    assert by_q["eval_query_id"].to_list() == ["e1"]
    # an evaluation question inside a rendered training prompt (DPO prompt, other wording around it)
    leak = {"dpo": [{"prompt": [{"role": "system", "content": "S"}, {"role": "user", "content": "Who wrote Hamlet?\nAsk."}],
                     "chosen": [], "rejected": []}]}
    found = train_eval_overlap({"clarify_sft": train}, leak, ev)
    assert found.rows() == [("export:dpo", "0", "e1", "evaluation question in a training example")]
    # a longer question that merely starts like an evaluation one is not a leak
    near = {"x": [{"messages": [{"role": "user", "content": "Who wrote Hamletmachine?"}]}]}
    assert train_eval_overlap({}, near, ev).height == 0


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

def _load(tmp_path, name: str, records: list[dict]) -> datasets.Dataset:
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return datasets.load_dataset("json", data_files=str(path), split="train")


@pytest.mark.parametrize("output", ["free_text", "json"])
def test_dpo_exports_use_the_evaluation_prompt_and_load(tmp_path, output):
    pairs = label_pairs(pl.DataFrame([_cand("q:c0", "clarify", 1.0), _cand("q:d", "direct", 0.5)]
                                     ).with_columns(text=pl.Series(["Clarifying Question: Which one?", "Paris"])),
                        "double_turn", True)
    cfg = DoubleTurnConfig(subject_output=output)
    asked = {a.item["system"]: list(a.request.messages)
             for a in turn2_asks(pl.DataFrame({"query_id": ["q"], "question": ["x?"]}), cfg)}
    recs = dpo_records(pairs, "clarify_or_direct", output)
    # the prompt is exactly what the Clarify-or-Direct subject is sent at evaluation, system message included
    assert recs[0]["prompt"] == asked["clarify_or_direct"] and recs[0]["prompt"][0]["role"] == "system"
    chosen = parse_turn2(subject_reply_text("clarify_or_direct", recs[0]["chosen"][0]["content"], output))
    rejected = parse_turn2(subject_reply_text("clarify_or_direct", recs[0]["rejected"][0]["content"], output))
    assert (chosen["action"], chosen["clarifying_question"]) == ("clarify", "Which one?")
    assert (rejected["action"], rejected["answer"]) == ("answer", "Paris")
    ds = _load(tmp_path, "dpo", recs)
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
                         "gold_answers": [[a[0] for a in answers]], "gold_set": [[a[0] for a in answers]]})


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
    texts = [" James Cameron\nQuestion: next?", "the james cameron.", "\n", "Negulesco"]
    res = [ChatResult(texts=[t], model="m") for t in texts]
    chat = Replay(res)
    row = feasible_answers(chat, qa, pool, cfg).row(0, named=True)
    # per round (seed + round): greedy then sampled, each a plain few-shot completion (no JSON schema)
    assert [(r.sampling.seed, r.sampling.temperature) for r in chat.requests] == [(0, 0.0), (0, 1.0), (1, 0.0), (1, 1.0)]
    assert all(r.json_schema is None for r in chat.requests)
    assert chat.requests[0].messages[-1]["content"] == "Question: Who wrote it?\nAnswer: Me\nQuestion: Who directed Titanic?\nAnswer:"
    # only the first line is the answer; "the james cameron." normalises to the first; an empty one is kept raw
    assert row["y_model"] == ["James Cameron", "Negulesco"] and row["y_model_matches_gold"] == [True, False]
    # two distinct model answers, one matching gold: passes the filter and is an SFT query at min_answers=2, not 3
    assert row["model_filter_passed"] and row["filter_reason"] is None and row["sft_model"]
    cfg3 = cfg.model_copy(update={"sft_min_answers": 3})
    assert not feasible_answers(Replay(res), qa, pool, cfg3)["sft_model"].item()
    assert row["sample_statuses"] == ["ok", "ok", "parse_error", "ok"] and row["status"] == "ok"
    assert json.loads(row["raw_output"]) == texts == row["raw_outputs"]
    assert (row["model"], row["n_calls"]) == ("m", 4)
    miss = [ChatResult(texts=["Steven Spielberg"], model="m")] * 4
    row = feasible_answers(Replay(miss), qa, pool, cfg).row(0, named=True)
    assert not row["model_filter_passed"] and row["filter_reason"] == "no model answer matches any gold answer"


def test_y_model_filter_answers_keeps_only_gold_matches():
    cfg = DoubleTurnConfig(rounds=2, n_shots=0, y_model_filter="answers", sft_min_answers=1)
    res = [ChatResult(texts=[t], model="m") for t in ("James Cameron", "Negulesco", "Jean Negulesco", "x")]
    row = feasible_answers(Replay(res), _qa_one(), [], cfg).row(0, named=True)
    assert row["y_model"] == ["James Cameron", "Jean Negulesco"] and row["y_model_matches_gold"] == [True, True]
    assert row["y_model_dropped"] == ["Negulesco", "x"]


def test_completion_answer_takes_the_first_line():
    assert completion_answer(" Answer: Paris\nQuestion: Where?\nAnswer: Rome") == "Paris"
    assert completion_answer("Paris Question: Where?") == "Paris"
    assert completion_answer("\n \n") is None


def _sft_frame(generator_reply: str, error: str | None = None) -> pl.DataFrame:
    feasible = pl.DataFrame({
        "query_id": ["q1"], "question": ["Who directed Titanic?"], "y_human": [["James Cameron", "Jean Negulesco"]],
        "y_human_aliases": [[["James Cameron"], ["Jean Negulesco"]]], "y_model": [[]],
        "sft_human": [True], "sft_model": [False]})
    return clarify_sft(Replay([ChatResult(texts=[generator_reply], error=error, model="g")]), feasible,
                       max_tokens=100)


def test_user_simulator_sft_matches_the_role_prompt_and_skips_leaks(tmp_path):
    three = pl.concat([
        _sft_frame(json.dumps({"decline": False, "clarifying_question": "Which film, 1997 or 1953?",
                               "reply_1": "The 1997 one.", "reply_2": "none"})),
        _sft_frame(json.dumps({"decline": False, "clarifying_question": "Which film?",
                               "reply_1": "I mean James Cameron's", "reply_2": "The older one"})
                   ).with_columns(pl.col("query_id") + "b"),
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
    assert sft_exports(three, "json")["user_simulator_sft"] == recs
    ds = _load(tmp_path, "usim", recs)
    assert ds.num_rows == 3 and [m["role"] for m in ds[0]["messages"]] == ["system", "user", "assistant"]


def test_sft_generator_may_decline_or_keep_a_subset():
    declined = _sft_frame(json.dumps({"decline": True, "clarifying_question": "", "reply_1": "", "reply_2": ""}))
    assert not declined["kept"].any()
    assert declined["reason"].to_list() == ["generator declined (fewer than two answers fit)", "declined", "declined"]
    one = _sft_frame(json.dumps({"decline": False, "clarifying_question": "Which film?", "reply_1": "The 1997 one",
                                 "reply_2": "none"}))
    assert one["reason"].to_list() == ["generator kept 1 answer(s), fewer than 2", "example dropped",
                                       "no clarifying answer"]
    no_question = _sft_frame(json.dumps({"decline": False, "clarifying_question": " ", "reply_1": "a", "reply_2": "b"}))
    assert no_question["status"].to_list() == ["parse_error"] * 3
    feasible = pl.DataFrame({
        "query_id": ["q1"], "question": ["Who directed Titanic?"], "y_human": [["A", "B", "C"]],
        "y_human_aliases": [[["A"], ["B"], ["C"]]], "y_model": [["A", "D"]], "sft_human": [True], "sft_model": [True]})
    reply = {"decline": False, "clarifying_question": "Which film?", "reply_1": "Old", "reply_2": "none", "reply_3": "New"}
    both = clarify_sft(Replay([ChatResult(texts=[json.dumps(reply)])] * 2), feasible, 100)
    human = both.filter(pl.col("answer_source") == "human")
    assert human["kept"].to_list() == [True, True, False, True]  # the subset {A, C} makes the example
    only_model = clarify_sft(Replay([ChatResult(texts=[json.dumps(reply)])]), feasible, 100, ["model"])
    assert set(only_model["answer_source"]) == {"model"}  # the Human-vs-Model ablation switch


@pytest.mark.parametrize("output", ["free_text", "json"])
def test_sft_exports_render_the_evaluation_prompts_and_load(tmp_path, output):
    sft = _sft_frame(json.dumps({"decline": False, "clarifying_question": "Which film, 1997 or 1953?",
                                 "reply_1": "The 1997 one.", "reply_2": "The older one"}))
    out = sft_exports(sft, output)
    cfg = DoubleTurnConfig(subject_output=output)
    asked = {a.item["system"]: list(a.request.messages)
             for a in turn2_asks(pl.DataFrame({"query_id": ["q1"], "question": ["Who directed Titanic?"]}), cfg)}
    for name, system in (("clarify_sft", "clarify"), ("direct_answer_sft", "direct_greedy"),
                         ("sft_dataset", "clarify_or_direct")):
        for rec in out[name]:
            assert rec["messages"][:-1] == asked[system], name  # same template, system message included
            reply = parse_turn2(subject_reply_text(system, rec["messages"][-1]["content"], output))
            assert reply["status"] == "ok", name
    assert parse_turn2(subject_reply_text("clarify", out["clarify_sft"][0]["messages"][-1]["content"], output)
                       )["clarifying_question"] == "Which film, 1997 or 1953?"
    assert [m["messages"][-1]["content"] for m in out["direct_answer_sft"]] == (
        ["James Cameron", "Jean Negulesco"] if output == "free_text"
        else ['{"answer": "James Cameron"}', '{"answer": "Jean Negulesco"}'])
    # the Turn-4 example is the answer_after request the answerer gets at evaluation, target parsed by its task
    after = out["answer_after_clarify_sft"][0]["messages"]
    item = {"question": "Who directed Titanic?", "clarifying_question": "Which film, 1997 or 1953?",
            "reply": "The 1997 one."}
    assert after[:-1] == list(ANSWER_AFTER.request(item).messages)
    assert answer_of(ANSWER_AFTER.parse(after[-1]["content"])) == "James Cameron"
    for name, recs in out.items():
        assert recs and _load(tmp_path, name, recs).num_rows == len(recs), name


def test_paired_bootstrap_significance():
    assert paired_bootstrap_p([1.0] * 30, [0.0] * 30, 2000, seed=0) == 0.0
    assert paired_bootstrap_p([0.5, 0.2], [0.5, 0.2], 100) == 1.0
    mixed = paired_bootstrap_p([1, 0, 1, 0, 1, 0], [0, 1, 0, 1, 0, 1], 2000, seed=1)
    assert mixed > 0.5 and mixed == paired_bootstrap_p([1, 0, 1, 0, 1, 0], [0, 1, 0, 1, 0, 1], 2000, seed=1)
    with pytest.raises(ValueError):
        paired_bootstrap_p([1.0], [1.0, 0.0], 10)


def test_table1_marks_the_system_better_than_every_other():
    rows = []
    for i in range(40):
        for system, f1 in (("direct_greedy", 0.0), ("direct_sampled", 0.0), ("clarify", 1.0),
                           ("clarify_or_direct", float(i % 2))):
            rows.append({"subject": "s", "system": system, "query_id": f"q{i}", "is_ambiguous": i % 3 == 0,
                         "action": "clarify" if system.startswith("clarify") else "answer", "turns": 1,
                         "f1": f1, "status": "ok"})
    table = answer_set_table(pl.DataFrame(rows), repeats=5, seed=0, bootstrap_samples=2000, alpha=0.01)
    sig = dict(zip(table["system"], table["significant"], strict=True))
    assert sig == {"direct_greedy": False, "direct_sampled": False, "clarify": True, "clarify_or_direct": True,
                   "random_baseline": None}
    assert json.loads(table.filter(pl.col("system") == "direct_greedy")["p_values"].item())["direct_sampled"] == 1.0


class ByRole:
    """A chat callable that answers every request of a role with one text and records the roles asked."""

    def __init__(self, texts: dict[str, str]):
        self.texts, self.roles = texts, []

    def __call__(self, role: str, requests: list[ChatRequest]) -> list[ChatResult]:
        self.roles.append(role)
        key = "subject" if role.startswith("subject:") else role
        return [ChatResult(texts=[self.texts[key]] * r.sampling.n, model=role) for r in requests]


def test_labels_and_evaluation_use_two_simulator_roles():
    cfg = DoubleTurnConfig(subject_output="free_text", n_direct_samples=1)
    qa = _qa_one()
    chat = ByRole({"subject": "Clarifying Question: Which film?", "eval_simulator": '{"reply": "The old one"}',
                   "answerer": '{"answer": "Jean Negulesco"}', "label_simulator": '{"reply": "The new one"}'})
    out = eval_interactions(chat, qa, qa, ["s"], cfg)
    assert "eval_simulator" in chat.roles and "label_simulator" not in chat.roles
    assert out.filter(pl.col("system") == "clarify")["user_replies"].item().to_list() == ["The old one"] * 2
    cands = pl.DataFrame({"candidate_id": ["q1:c0"], "query_id": ["q1"], "kind": ["clarify"], "in_pairs": [True],
                          "clarifying_question": ["Which film?"]})
    label = ByRole({"label_simulator": '{"reply": "The new one"}'})
    assert user_simulations(label, cands, qa)["reply"].to_list() == ["The new one"] * 2
    assert label.roles == ["label_simulator"]
    roles = LLMConfig(roles={"default": RoleConfig(), "label_simulator": RoleConfig(model="small.gguf"),
                             "eval_simulator": RoleConfig(model="big.gguf")})
    assert roles.role("eval_simulator").model == "big.gguf"


def test_sft_and_dpo_stages_are_disjoint_and_cover_the_training_queries():
    from dagster_project.core.double_turn.split import shared_queries, stage_queries

    queries = pl.DataFrame({"query_id": [f"q{i}" for i in range(200)]})
    sft = stage_queries(queries, "sft", 0, 0.5)
    dpo = stage_queries(queries, "dpo", 0, 0.5)
    assert not set(sft["query_id"]) & set(dpo["query_id"])
    assert sft.height + dpo.height == 200 and 70 < sft.height < 130
    assert stage_queries(queries, "sft", 0, None).height == 200  # null: both stages use every query
    assert stage_queries(queries, "sft", 1, 0.5)["query_id"].to_list() != sft["query_id"].to_list()
    assert shared_queries(sft, dpo) == [] and shared_queries(sft, queries) == sorted(sft["query_id"].to_list())


def test_each_stage_gets_its_own_selection():
    from dagster_project.core.double_turn.qa import select_queries
    from dagster_project.core.double_turn.split import stage_queries

    qa = pl.DataFrame({"query_id": [f"q{i}" for i in range(40)], "use": ["train"] * 30 + ["eval"] * 10,
                       "is_ambiguous": [i % 2 == 0 for i in range(40)]})
    out = select_queries(qa, 4, 0, sft_fraction=0.5)
    train = out.filter(pl.col("selected_train"))
    assert stage_queries(train, "sft", 0, 0.5).height == 4 and stage_queries(train, "dpo", 0, 0.5).height == 4
    assert out["selected_eval"].sum() == 4 and not (out["selected_train"] & out["selected_eval"]).any()
    assert select_queries(qa, 4, 0)["selected_train"].sum() == 4  # no stages: one selection, as before
