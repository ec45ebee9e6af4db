"""Pairwise win / tie / lose between two subjects (ClariLM Fig. 4): evaluation.judge_subject_pairs, scripted judge."""

import json

import polars as pl
import pytest

from dagster_project.config import EvaluationConfig, ParamsError, parse_params
from dagster_project.core.clarifymt.judge import pairwise_judgements, pairwise_summary, subject_pairs
from dagster_project.core.clarifymt.report import _pairwise_sections
from dagster_project.llm.chat import ChatResult

# (action, response) per dialogue for each subject, method base; q0-q2 on dataset "in3", q3 only evaluated by "trained"
REPLIES = {
    "trained": [("clarify", "Which city do you mean?"), ("answer", "Boil it for ten minutes."),
                ("clarify", "Road or trail?"), ("invalid", ""), ("answer", "Yes.")],
    "base": [("answer", "Paris is nice."), ("answer", "About ten minutes."), ("invalid", "hmm"), ("answer", "x")],
}


def _predictions() -> pl.DataFrame:
    rows = []
    for subject, replies in REPLIES.items():
        for i, (action, response) in enumerate(replies):
            rows.append({"dataset": "in3" if i < 4 else "clarilm_test", "subject": subject, "method": "base",
                         "dialogue_id": f"q{i}", "turn": 1, "subtype": None,
                         "reference_action": "clarify" if i in (0, 2) else "answer",
                         "reference_question": "Where?" if i in (0, 2) else None, "status": "ok",
                         "action": action, "response": response})
    # another method of the same subjects: never part of a subject pair (trained_method is base)
    rows.append({**rows[0], "method": "cot", "response": "ignored"})
    return pl.DataFrame(rows)


def _messages() -> pl.DataFrame:
    return pl.DataFrame([{"dataset": "in3" if i < 4 else "clarilm_test", "dialogue_id": f"q{i}", "turn": 1,
                          "messages": [{"role": "user", "content": f"task {i}"}]} for i in range(5)])


def _judge(sent: list, prefer: str | None):
    """Prefers the reply containing `prefer` wherever it is shown; with None always says 'first' (position bias)."""
    def chat(role, requests):
        out = []
        for r in requests:
            sent.append(r.messages[-1]["content"])
            text = r.messages[-1]["content"]
            first = text.split("First reply:")[1].split("Second reply:")[0]
            verdict = "first" if prefer is None or prefer in first else "second"
            out.append(ChatResult(texts=[json.dumps({"better": verdict})]))
        return out
    return chat


def _cfg(**kw) -> EvaluationConfig:
    return EvaluationConfig(methods=["base", "cot"], datasets=["clarifymt", "clarilm_test"],
                            judge_subject_pairs=[["trained", "base"]], **kw)


def test_subject_pair_items_are_the_turns_both_evaluated_with_trained_method():
    pairs = subject_pairs(_predictions(), _cfg()).sort("dialogue_id")
    # q4 only "trained" evaluated: not an item; the cot row is not either
    assert pairs["dialogue_id"].to_list() == ["q0", "q1", "q2", "q3"]
    assert set(pairs["subject"]) == {"trained"} and set(pairs["subject_b"]) == {"base"}
    assert set(pairs["method_a"]) == set(pairs["method_b"]) == {"base"} and set(pairs["comparison"]) == {"subjects"}
    first = pairs.row(0, named=True)
    assert (first["output_a"], first["output_b"]) == ("Which city do you mean?", "Paris is nice.")


def test_judge_subject_datasets_restricts_the_items():
    cfg = _cfg(judge_subject_datasets=["clarilm_test"])
    assert subject_pairs(_predictions(), cfg).is_empty()  # the only clarilm_test turn was evaluated by one side


def test_subject_pairs_are_judged_in_both_orders_and_a_win_must_hold_in_both():
    sent: list[str] = []
    out = pairwise_judgements(_judge(sent, "Which city"), _predictions(), _messages(), _cfg(), "judge").sort(
        "dialogue_id")
    # q0, q1: both usable -> judged twice (A first, then B first); q2: only A usable -> win by rule; q3: only B -> lose
    assert out["judged_by"].to_list() == ["judge", "judge", "rule", "rule"]
    assert len(sent) == 4
    assert "First reply: Clarifying question: Which city do you mean?" in sent[0]
    assert "First reply: Answer: Paris is nice." in sent[1]  # the swapped order
    # q0: A preferred in both orders -> win; q1: the judge prefers neither text -> 'second' twice -> tie
    assert out["outcome"].to_list() == ["win", "tie", "win", "lose"]


def test_a_position_biased_judge_gives_ties_only():
    out = pairwise_judgements(_judge([], None), _predictions(), _messages(), _cfg(), "judge")
    judged = out.filter(pl.col("judged_by") == "judge")
    assert judged.height == 2 and set(judged["outcome"]) == {"tie"}


def test_a_failed_judge_call_is_an_error_row_not_an_outcome_and_the_summary_counts_it():
    def chat(role, requests):
        return [ChatResult(texts=[""], error="judge down") for _ in requests]
    out = pairwise_judgements(chat, _predictions(), _messages(), _cfg(), "judge")
    s = pairwise_summary(out).row(0, named=True)
    assert out.filter(pl.col("judged_by") == "judge")["status"].to_list() == ["llm_error"] * 2
    assert (s["n"], s["win"], s["tie"], s["lose"], s["errors"]) == (2, 1, 0, 1, 2)


def test_method_and_subject_pairs_share_one_table_and_the_report_shows_figure_4():
    cfg = _cfg(judge_pairs=[["cot", "base"]])
    out = pairwise_judgements(_judge([], "Which city"), _predictions(), _messages(), cfg, "judge")
    assert set(out["comparison"]) == {"methods", "subjects"}
    methods = out.filter(pl.col("comparison") == "methods")
    assert (methods["subject"] == methods["subject_b"]).all()
    summary = pairwise_summary(out).filter(pl.col("comparison") == "subjects").row(0, named=True)
    assert (summary["dataset"], summary["subject"], summary["subject_b"]) == ("in3", "trained", "base")
    assert (summary["n"], summary["win"], summary["tie"], summary["lose"]) == (4, 2, 1, 1)
    text = "\n".join(_pairwise_sections(out))
    assert "Figure 4" in text and "| in3 | trained | base |" in text


def test_unknown_subject_in_a_pair_names_the_params_key():
    with pytest.raises(ParamsError, match=r"evaluation.judge_subject_pairs: unknown subject\(s\) \['nope'\]"):
        parse_params({"llm": {"subjects": {"a": {"backend": "llamacpp", "model": "m"}}},
                      "evaluation": {"judge_subject_pairs": [["a", "nope"]]}})


@pytest.mark.parametrize("section, message", [
    ({"judge_subject_pairs": [["a", "a"]]}, "two different subjects"),
    ({"judge_subject_pairs": [["a", "b"]], "methods": ["base", "cot"], "subject_methods": {"a": ["cot"]}},
     r"\['a'\] do not run trained_method 'base'"),
    ({"judge_subject_datasets": []}, r"judge_subject_datasets: an empty list"),
])
def test_bad_subject_pair_settings_name_the_key(section, message):
    subjects = {s: {"backend": "llamacpp", "model": "m"} for s in ("a", "b")}
    with pytest.raises(ParamsError, match=message):
        parse_params({"llm": {"subjects": subjects}, "evaluation": section})


def test_judge_datasets_outside_evaluation_datasets_are_not_evaluated_and_not_an_error():
    # a user who narrows evaluation.datasets need not edit judge_subject_datasets too: the other names drop out
    from dagster_project.defs.evaluation.assets import subject_datasets

    subjects = {s: {"backend": "llamacpp", "model": "m"} for s in ("a", "b", "c")}
    p = parse_params({"llm": {"subjects": subjects}, "evaluation": {
        "datasets": ["clarifymt", "clarilm_test"], "trained_datasets": None, "judge_subject_pairs": [["a", "b"]],
        "judge_subject_datasets": ["clarilm_test", "in3"]}})
    assert subject_datasets(p, "a") == ["clarifymt", "clarilm_test"]


def test_the_evaluation_headline_shows_figure_4_from_the_stored_table(tmp_path):
    from dagster_project.defs.evaluation.group import figure4

    out = pairwise_judgements(_judge([], "Which city"), _predictions(), _messages(), _cfg(), "judge")
    (tmp_path / "evaluation").mkdir()
    out.write_parquet(tmp_path / "evaluation" / "pairwise_judgements.parquet")
    t = figure4(tmp_path)
    assert t.to_dicts() == [{"dataset": "in3", "subject": "trained", "subject_b": "base", "n": 4, "win": 2, "tie": 1,
                             "lose": 1, "errors": 0}]
