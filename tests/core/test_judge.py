"""LLM-as-judge helpers (core/judge.py): sampling, score parsing, position-swapped pairwise outcomes."""

import json

import polars as pl
import pytest

from dagster_project.config import EvaluationConfig
from dagster_project.core.clarifymt.judge import (
    asked_expr,
    candidate_turns,
    has_question,
    judge_scores,
    method_pairs,
    pairwise_judgements,
    pairwise_outcome,
    pairwise_requests,
    parse_score,
    parse_verdict,
    pointwise_requests,
    rule_outcome,
    sample_items,
)
from dagster_project.llm.chat import ChatResult


@pytest.mark.parametrize("ab, ba, outcome", [
    ("first", "second", "win"),     # A preferred in both orders
    ("second", "first", "lose"),    # B preferred in both orders
    ("first", "first", "tie"),      # the judge prefers whatever comes first: no real preference
    ("second", "second", "tie"),
    ("tie", "second", "tie"),
    ("first", "tie", "tie"),
    (None, "second", "tie"),
])
def test_pairwise_outcome_needs_both_orders(ab, ba, outcome):
    assert pairwise_outcome(ab, ba) == outcome


def test_rule_outcome():
    assert rule_outcome(True, False) == "win" and rule_outcome(False, True) == "lose"
    assert rule_outcome(False, False) == "tie" and rule_outcome(True, True) is None


def test_parse_score_and_verdict():
    assert parse_score(ChatResult(texts=['{"score": 4}'])) == (4, "ok", None)
    assert parse_score(ChatResult(texts=['{"score": 9}']))[1:] == ("parse_error", "score 9 outside 0-5")
    assert parse_score(ChatResult(texts=["four"]))[1] == "parse_error"
    assert parse_score(ChatResult(texts=[""], error="down")) == (None, "llm_error", "down")
    assert parse_verdict(ChatResult(texts=['{"better": "second"}'])) == ("second", None)
    assert parse_verdict(ChatResult(texts=['{"better": "both"}']))[0] is None


def _cands():
    rows = []
    for method in ("base", "agent"):
        for sub in ("lexical", "scope"):
            for i in range(3):
                rows.append({"dataset": "d", "subject": "s", "method": method, "dialogue_id": f"{sub}-{i}", "turn": 1,
                             "subtype": sub, "reference_action": "clarify", "reference_question": "Which?",
                             "status": "ok", "action": "clarify", "response": "Which one?"})
    rows.append({**rows[0], "reference_question": None, "dialogue_id": "noref"})
    rows.append({**rows[0], "status": "llm_error", "dialogue_id": "err"})
    rows.append({**rows[0], "reference_action": "answer", "dialogue_id": "ans"})
    return pl.DataFrame(rows)


def test_candidates_and_sampling_are_paired_across_methods():
    c = candidate_turns(_cands())
    assert c.height == 12 and not set(c["dialogue_id"]) & {"noref", "err", "ans"}
    items = sample_items(c, 2, seed=3)
    assert items.height == 4  # 2 per subtype, shared by both methods
    assert sorted(items["dialogue_id"].str.split("-").list.first().to_list()) == ["lexical"] * 2 + ["scope"] * 2
    assert items.equals(sample_items(c, 2, seed=3))
    assert sample_items(c, 10, seed=0).height == 6 and sample_items(c, 0, seed=0).height == 0


def test_has_question():
    assert has_question("clarify", "Which?") and not has_question("clarify", "  ")
    assert not has_question("answer", "Which?") and not has_question("invalid", None)


def test_request_contents():
    row = pl.DataFrame([{"messages": [{"role": "user", "content": "Tell me about bass."}],
                         "reference_question": "Fish or instrument?", "response": "Which bass?",
                         "output_a": "Which bass?", "output_b": "Why?"}])
    [req] = pointwise_requests(row)
    text = req.messages[-1]["content"]
    assert "User: Tell me about bass." in text and "Fish or instrument?" in text and "Which bass?" in text
    assert req.json_schema["properties"]["score"]["enum"] == [0, 1, 2, 3, 4, 5]
    first, second = pairwise_requests(row)
    assert "First candidate: Which bass?" in first.messages[-1]["content"]
    assert "First candidate: Why?" in second.messages[-1]["content"]  # positions swapped
    assert json.dumps(first.json_schema)


def test_asked_expr_matches_has_question():
    df = pl.DataFrame({"a": ["clarify", "clarify", "answer", None], "r": ["Which?", " ", "Which?", "x"]})
    assert df.select(asked_expr("a", "r"))["a"].to_list() == [has_question(a, r) for a, r in df.iter_rows()]


# ------------------------------------------------- pairwise as in ClariLM §4.6.2: whole outputs, no reference

def _outputs():
    """Two methods on 4 turns: a clarify turn where both ask, answer turns where both answer or one is invalid."""
    rows = []
    for m, replies in (("agent", [("clarify", "Which bass?"), ("answer", "Bass is a fish."), ("answer", "42."),
                                  ("invalid", "")]),
                       ("base", [("clarify", "Why?"), ("answer", "No idea."), ("invalid", "hmm"),
                                 ("invalid", "")])):
        for i, (action, response) in enumerate(replies):
            rows.append({"dataset": "d", "subject": "s", "method": m, "dialogue_id": f"q{i}", "turn": 1,
                         "subtype": "lexical", "reference_action": "clarify" if i == 0 else "answer",
                         "reference_question": "Fish or instrument?" if i == 0 else None, "status": "ok",
                         "action": action, "response": response})
    return pl.DataFrame(rows)


def _messages():
    return pl.DataFrame([{"dataset": "d", "dialogue_id": f"q{i}", "turn": 1,
                          "messages": [{"role": "user", "content": f"message {i}"}]} for i in range(4)])


def _judge(sent, prefer="Answer: Bass"):
    """Prefers the reply containing `prefer` in whichever slot it is, else 'first'."""
    def chat(role, requests):
        out = []
        for r in requests:
            sent.append((role, r))
            text = r.messages[-1]["content"]
            first = text.split("First reply:")[1].split("Second reply:")[0] if "First reply:" in text else ""
            verdict = "first" if prefer in first or prefer not in text else "second"
            out.append(ChatResult(texts=[json.dumps({"better": verdict})]))
        return out
    return chat


def test_output_mode_judges_whole_replies_without_reference_in_both_orders():
    cfg = EvaluationConfig(methods=["clarify_agent", "base"], judge_pairs=[["clarify_agent", "base"]])
    assert cfg.pairwise_mode == "output"  # the paper's protocol is the default
    preds = _outputs().with_columns(pl.col("method").replace({"agent": "clarify_agent"}))
    sent = []
    out = pairwise_judgements(_judge(sent), preds, _messages(), cfg, "judge-model").sort("dialogue_id")
    # every evaluated turn is an item, answer turns included; both usable -> the judge, twice
    assert out["dialogue_id"].to_list() == ["q0", "q1", "q2", "q3"]
    assert out["judged_by"].to_list() == ["judge", "judge", "rule", "rule"]
    # q0: position-biased 'first' both times -> tie; q1: agent's answer preferred in both orders -> win;
    # q2: only the agent has a usable reply -> win by rule; q3: neither -> tie
    assert out["outcome"].to_list() == ["tie", "win", "win", "tie"]
    assert set(out["mode"]) == {"output"} and len(sent) == 4
    texts = [r.messages[-1]["content"] for _, r in sent]
    assert not any("Fish or instrument?" in t for t in texts)  # no reference shown
    assert "First reply: Answer: Bass is a fish." in texts[2] and "Second reply: Answer: Bass is a fish." in texts[3]
    assert "First reply: Clarifying question: Which bass?" in texts[0]


def test_reference_question_mode_stays_as_an_option():
    cfg = EvaluationConfig(methods=["clarify_agent", "base"], judge_pairs=[["clarify_agent", "base"]],
                           pairwise_mode="reference_question", judge_per_subtype=5)
    preds = _outputs().with_columns(pl.col("method").replace({"agent": "clarify_agent"}))
    sent = []
    out = pairwise_judgements(_judge(sent), preds, _messages(), cfg, "m")
    assert out["dialogue_id"].to_list() == ["q0"] and set(out["mode"]) == {"reference_question"}
    assert "Fish or instrument?" in sent[0][1].messages[-1]["content"]


def test_output_items_cap_per_dataset():
    cfg = EvaluationConfig(methods=["clarify_agent", "base"], judge_pairs=[["clarify_agent", "base"]],
                           pairwise_items=2)
    preds = _outputs().with_columns(pl.col("method").replace({"agent": "clarify_agent"}))
    assert method_pairs(preds, cfg).height == 2


def test_a_clarify_reply_that_is_no_question_scores_zero_by_rule_without_a_judge_call():
    """Issue 14 item 4: "The answer is: ..." labelled clarify is not a clarifying question; the judge never sees it."""
    rows = [{"dataset": "d", "subject": "s", "method": "m", "dialogue_id": f"q{i}", "turn": 1, "subtype": "lexical",
             "persona": "precise", "reference_action": "clarify", "reference_question": "Fish or instrument?",
             "status": "ok", "action": "clarify", "response": text}
            for i, text in enumerate(["Do you mean the fish?", "The answer is: a fish."])]
    sent = []

    def chat(role, requests):
        sent.extend(requests)
        return [ChatResult(texts=[json.dumps({"score": 5})]) for _ in requests]

    cfg = EvaluationConfig(judge_per_subtype=5)
    out = judge_scores(chat, pl.DataFrame(rows), _messages(), cfg, "judge-model").sort("dialogue_id")
    assert out["judged_by"].to_list() == ["judge", "rule"]
    assert out["score"].to_list() == [5, 0] and out["error"].to_list() == [None, "not a question"]
    assert len(sent) == 1 and "Do you mean the fish?" in sent[0].messages[-1]["content"]


def test_bertscore_runs_beside_the_judge_calls_when_asked_with_the_same_scores():
    """overlap=True (a remote judge): BERTScore is computed while the judge's calls are out. The fake judge waits
    until BERTScore has started, which only happens if it runs on another thread (a timeout fails the test)."""
    import threading

    rows = [{"dataset": "d", "subject": "s", "method": "m", "dialogue_id": f"q{i}", "turn": 1, "subtype": "lexical",
             "persona": "precise", "reference_action": "clarify", "reference_question": "Fish or instrument?",
             "status": "ok", "action": "clarify", "response": text}
            for i, text in enumerate(["Do you mean the fish?", "Which bass, the fish or the guitar?"])]
    started, threads = threading.Event(), []

    def bertscore(cands, refs):
        started.set()
        threads.append(threading.current_thread())
        return [round(len(c) / 100, 2) for c in cands]

    def chat(role, requests):
        assert started.wait(10), "BERTScore did not start while the judge's calls were out"
        return [ChatResult(texts=[json.dumps({"score": 4})]) for _ in requests]

    cfg = EvaluationConfig(judge_per_subtype=5)
    beside = judge_scores(chat, pl.DataFrame(rows), _messages(), cfg, "judge-model", bertscore, overlap=True)
    assert threads[0] is not threading.main_thread()
    after = judge_scores(lambda role, reqs: [ChatResult(texts=[json.dumps({"score": 4})]) for _ in reqs],
                         pl.DataFrame(rows), _messages(), cfg, "judge-model", bertscore)
    assert threads[1] is threading.main_thread()
    assert beside.equals(after) and beside["bertscore_f1"].to_list() == [0.21, 0.35]
    assert beside["score"].to_list() == [4, 4]
