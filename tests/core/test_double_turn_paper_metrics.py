"""The double-turn scores follow the paper's released metric code (mikejqzhang/clarifying_questions,
src/metrics.py + src/utils.py). Each case is one where that code and our earlier metric disagree; the expected
numbers are worked out by hand from the paper's code (comments), the earlier ones are quoted for the record."""

import json

import polars as pl
import pytest

from dagster_project.config import DoubleTurnConfig
from dagster_project.core.double_turn.evaluation import eval_interactions
from dagster_project.core.double_turn.metrics import (
    exact_match,
    normalize_answer,
    paper_answer_set_f1,
    paper_clarify_f1,
    paper_em,
    paper_leak,
    paper_normalize,
    paper_top_k,
    paper_user_correct,
)
from dagster_project.core.double_turn.qa import qa_tables, read_qa_file
from dagster_project.core.double_turn.simulation import leaks_answer
from dagster_project.llm.chat import ChatRequest, ChatResult


def test_normalisation_removes_all_whitespace():
    # lower -> drop punctuation -> articles become spaces -> every whitespace removed
    assert paper_normalize("The  Jay Z") == "jayz" == paper_normalize("Jay-Z")
    assert paper_normalize("An Apple, a day!") == "appleday"
    assert paper_normalize("Theresa") == "theresa"  # 'the' only as a whole word, before spaces go
    assert paper_normalize(None) is None and paper_normalize("") == ""
    # the word-keeping normaliser (leaks, merging readings) still tells them apart
    assert normalize_answer("Jay Z") == "jay z" != normalize_answer("Jay-Z")


def test_jay_z_matches_across_spacing():
    # paper: {jayz} & {jayz, beyonce} = 1 match; P = 1/1, R = 1/2, F1 = 2/3 (earlier metric: F1 0.0)
    r = paper_answer_set_f1(["Jay-Z"], ["Jay Z", "Beyonce"])
    assert (r["precision"], r["recall"], r["f1"]) == (1.0, 0.5, pytest.approx(2 / 3))
    assert not exact_match("Jay-Z", ["Jay Z"])  # the earlier matching, kept for training labels


def test_gold_set_is_the_raw_string_set_without_merging(tmp_path):
    # paper: set(answers) has 3 raw strings; {moscow} & {moscow, newyorkcity} = 1; P = 1, R = 1/3, F1 = 1/2
    # (earlier: "Moscow"/"moscow" merged into one reading, k = 2, F1 = 2/3)
    r = paper_answer_set_f1(["Moscow"], ["Moscow", "moscow", "New York City"])
    assert (r["recall"], r["f1"]) == (pytest.approx(1 / 3), pytest.approx(0.5))
    path = tmp_path / "x.clarify.jsonl"
    path.write_text(json.dumps({"id": "q1", "question": "Capital?", "answers": ["Moscow", "moscow", "New York City",
                                                                               "Moscow"]}) + "\n")
    qa, _ = qa_tables([read_qa_file(path, "clarify_jsonl")])
    row = qa.row(0, named=True)
    assert row["gold_set"] == ["Moscow", "moscow", "New York City"]  # exact duplicates once, as set() does
    assert row["n_interpretations"] == 2  # the merged readings stay for building training data


def test_precision_counts_every_prediction_of_the_list():
    # 4 predictions, distinct normalised matches {nile, amazon}: P = 2/4, R = 2/3, F1 = 2PR/(P+R) = 4/7
    r = paper_answer_set_f1(["Nile", "nile.", "Nile River", "Amazon"], ["Nile", "Amazon", "Yangtze"])
    assert (r["precision"], r["recall"], r["f1"]) == (0.5, pytest.approx(2 / 3), pytest.approx(4 / 7))


def test_sampled_answers_are_the_k_most_frequent_normalised_samples():
    # counts: "" (3 unusable samples) 3, jayz 2, beyonce 1 -> top 2 = ["", "jayz"]
    top = paper_top_k(["Jay Z", None, "Jay-Z", "", "Beyonce", None], 2)
    assert top == ["", "jayz"]
    # P = 1/2 (the empty answer matches nothing), R = 1/2, F1 = 1/2
    assert paper_answer_set_f1(top, ["Jay Z", "Beyonce"])["f1"] == pytest.approx(0.5)
    assert paper_top_k(["b", "a b", "B."], 5) == ["b"]  # "a b" -> " b" -> "b": three votes for one answer


def test_article_only_answer_matches_an_article_only_gold():
    # "a" and "The" both normalise to "" and are non-empty raw strings: em is true; {""} & {"", paris} = 1,
    # P = 1, R = 1/2, F1 = 2/3 (earlier: an answer empty after normalisation never matched, F1 0.0)
    assert paper_em("a", "The") and not exact_match("a", ["The"])
    assert paper_answer_set_f1(["a"], ["The", "Paris"])["f1"] == pytest.approx(2 / 3)
    assert not paper_em("", "The")  # an empty raw string never matches
    # after clarifying, "" is a substring of every text: an article-only gold always counts as leaked
    assert not paper_user_correct("a", "The", "the first one", "Which one?")


def test_leak_needs_the_answer_in_both_the_reply_and_the_question():
    reply = "I mean the one by James Cameron"
    # earlier: any whole-word appearance in the reply leaked (user abstained, scored wrong)
    assert leaks_answer(reply, ["James Cameron"])
    assert not paper_leak("James Cameron", reply, "Do you mean the 1997 film or the 1953 film?")
    assert paper_user_correct("James Cameron", "James Cameron", reply, "Do you mean the 1997 film or the 1953 film?")
    assert paper_leak("James Cameron", reply, "Do you mean James Cameron's film or Jean Negulesco's?")
    # substrings, not words: "5" is inside "1950" and "1953" (earlier: no leak)
    assert not leaks_answer("the one from 1950", ["5"])
    assert paper_leak("5", "the one from 1950", "The 1953 or the 1997 one?")


def test_clarify_score_is_users_served_over_users():
    cq = "Do you mean the 1984 song or the 1994 cover?"
    correct = [paper_user_correct("Leonard Cohen", "Leonard Cohen", "the 1984 one", cq),
               paper_user_correct("Leonard Cohen", "Jeff Buckley", "the cover", cq),  # answer of another user
               paper_user_correct("Jay Buckley", "Jeff Buckley", "", cq),  # an empty reply never counts
               paper_user_correct(None, "Rufus Wainwright", "the 2001 one", cq)]
    assert correct == [True, False, False, False]
    assert paper_clarify_f1(correct) == {"precision": 0.25, "recall": 0.25, "f1": 0.25}
    assert paper_user_correct("Jeff  Buckley.", "Jeff Buckley", "the cover", cq)


class ByRole:
    """A chat callable replying one fixed text per role."""

    def __init__(self, texts: dict[str, str]):
        self.texts = texts

    def __call__(self, role: str, requests: list[ChatRequest]) -> list[ChatResult]:
        key = "subject" if role.startswith("subject:") else role
        return [ChatResult(texts=[self.texts[key]] * r.sampling.n, model=role) for r in requests]


def test_evaluation_answers_a_user_whose_reply_names_the_answer():
    qa = pl.DataFrame({"query_id": ["q1"], "question": ["Who directed Titanic?"], "is_ambiguous": [True],
                       "n_interpretations": [2], "answers": [[["James Cameron"], ["Jean Negulesco"]]],
                       "gold_answers": [["James Cameron", "Jean Negulesco"]],
                       "gold_set": [["James Cameron", "Jean Negulesco"]]})
    chat = ByRole({"subject": "Clarifying Question: Which film do you mean?",
                   "eval_simulator": '{"reply": "The one by James Cameron"}',
                   "answerer": '{"answer": "James Cameron"}'})
    out = eval_interactions(chat, qa, qa, ["s"], DoubleTurnConfig(subject_output="free_text", n_direct_samples=1))
    row = out.filter(pl.col("system") == "clarify").row(0, named=True)
    # user 0's reply names their answer but the question does not: no leak in the paper, answered correctly;
    # user 1 gets "James Cameron" too: wrong. F1 = 1/2 (earlier: user 0 abstained for the leak, F1 0.0)
    assert row["abstain_reasons"] == ["leak", None] and row["predictions"] == ["James Cameron", "James Cameron"]
    assert row["f1"] == pytest.approx(0.5)
