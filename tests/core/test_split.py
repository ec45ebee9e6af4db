"""core/clarilm/split.py and its use: seeded query-disjoint train/test split, test never exported, leak check."""

import polars as pl
import pytest

from dagster_project.config import parse_params
from dagster_project.core.clarilm.split import assign_split
from dagster_project.defs.quality.checks import SUITES_DIR, load_suite, validate_frame

QUESTIONS = [f"Question number {i}?" for i in range(20)]


def _q(questions, selected=None):
    return pl.DataFrame({"question_id": [f"q{i}" for i in range(len(questions))], "question": questions,
                         "selected": selected if selected is not None else [True] * len(questions)})


def test_split_is_seeded_sized_and_ignores_row_order():
    a = assign_split(_q(QUESTIONS), 0.25, seed=3)
    assert a["split"].value_counts().sort("split").rows() == [("test", 5), ("train", 15)]
    again = assign_split(_q(QUESTIONS).reverse(), 0.25, seed=3).sort("question_id")
    assert again["split"].to_list() == a.sort("question_id")["split"].to_list()
    other = assign_split(_q(QUESTIONS), 0.25, seed=4)
    assert other["split"].to_list() != a["split"].to_list()


def test_split_is_query_disjoint_and_only_over_selected_questions():
    qs = ["Plan a trip.", "plan a TRIP", "Plan a trip!!", "Fix my code.", "Write a poem.", "Name a color."]
    out = assign_split(_q(qs, [True, True, True, True, True, False]), 0.5, seed=0)
    assert out["split"][5] is None  # not selected: neither train nor test
    assert out["query_key"][:3].to_list() == ["plan a trip"] * 3 and out["split"][:3].n_unique() == 1
    # 4 distinct selected queries -> 2 test keys, however many rows share a key
    assert out.filter(pl.col("split") == "test")["query_key"].n_unique() == 2
    for seed in range(10):
        s = assign_split(_q(qs), 0.5, seed)
        assert s.group_by("query_key").agg(pl.col("split").n_unique())["split"].max() == 1


@pytest.fixture()
def question_set(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "assets/questions").mkdir(parents=True)
    (tmp_path / "assets/annotations").mkdir(parents=True)
    pl.DataFrame({"pair_id": ["p"], "split": ["train"]}).write_parquet(tmp_path / "assets/annotations/preference_pairs.parquet")
    assign_split(_q(QUESTIONS), 0.25, seed=3).write_parquet(tmp_path / "assets/questions/question_set.parquet")
    return assign_split(_q(QUESTIONS), 0.25, seed=3)


def _leak_results(suite_name, frame):
    _, meta = validate_frame(frame, load_suite(SUITES_DIR / suite_name), parse_params({}))
    return next(v["success"] for k, v in meta.items() if "no held-out test question" in k)


@pytest.mark.parametrize("by", ["id", "text"])
def test_an_injected_leak_fails_the_blocking_checks(question_set, by):
    train = question_set.filter(pl.col("split") == "train").row(0, named=True)
    test = question_set.filter(pl.col("split") == "test").row(0, named=True)

    def sft(row, qid):
        return {"id": qid, "question_id": qid, "decision": "ask", "messages": [
            {"role": "user", "content": row["question"]}, {"role": "assistant", "content": "Need clarification: yes\nX?"}]}

    def dpo(row, qid):
        return {"id": qid, "question_id": qid, "type": "better_question",
                "prompt": [{"role": "user", "content": row["question"]}],
                "chosen": [{"role": "assistant", "content": "A"}], "rejected": [{"role": "assistant", "content": "B"}]}

    leaked_id = test["question_id"] if by == "id" else "renamed"
    for name, make in (("annotations.sft_dataset.yaml", sft), ("annotations.dpo_dataset.yaml", dpo)):
        assert load_suite(SUITES_DIR / name).blocking
        clean = pl.DataFrame([make(train, train["question_id"])])
        assert _leak_results(name, clean) is True
        leaky = pl.DataFrame([make(train, train["question_id"]),
                              make(test if by == "text" else train, leaked_id)])
        assert _leak_results(name, leaky) is False
