"""The paper's base evaluation prompt (Fig. 7c) and prediction parsing (agent/base.py)."""

import polars as pl

from dagster_project.core.clarifymt.agent.base import base_messages, base_requests, parse_predictions
from dagster_project.llm.chat import ChatResult
from dagster_project.llm.prompts import load_prompt

HISTORY = [
    {"role": "user", "content": "Tell me about bass."},
    {"role": "assistant", "content": "Fish or instrument?"},
    {"role": "user", "content": "The one that costs $5."},
]


def test_base_messages_single_turn():
    msgs = base_messages(HISTORY[:1])
    prompt = load_prompt("evaluate_base", "text")
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert msgs[0]["content"] == prompt.system.strip()
    assert "The clarifying question is" in msgs[0]["content"]
    assert msgs[1]["content"].startswith("Tell me about bass.")
    assert msgs[1]["content"].endswith('(Start your reply with "The answer is" or "The clarifying question is".)')


def test_base_messages_keeps_history_and_reminds_last_user():
    msgs = base_messages(HISTORY)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert msgs[1:3] == HISTORY[:2]  # earlier turns untouched
    last = msgs[-1]["content"]
    assert last.startswith("The one that costs $5.")  # "$" in the user's text is kept literally
    assert "(Start your reply with" in last
    # the reminder appears once, only on the last user message
    assert sum("(Start your reply with" in m["content"] for m in msgs) == 1
    assert HISTORY[-1]["content"] == "The one that costs $5."  # input not mutated


def test_base_requests():
    reqs = base_requests([HISTORY[:1], HISTORY], max_tokens=48)
    assert len(reqs) == 2
    assert all(r.prompt_version == load_prompt("evaluate_base", "text").version for r in reqs)
    assert all(r.sampling.temperature == 0.0 and r.sampling.max_tokens == 48 for r in reqs)
    assert len(reqs[1].messages) == 4 and reqs[0].json_schema is None


def test_parse_predictions_statuses():
    results = [
        ChatResult(texts=["The clarifying question is: fish or guitar?"], model="m", tokens_in=3, tokens_out=4),
        ChatResult(texts=["**The answer is** bass is a fish."], model="m", cached=True, latency_s=0.1),
        ChatResult(texts=["Bass can mean a fish."], model="m"),
        ChatResult(texts=[], error="timeout", model="m"),
    ]
    df = parse_predictions(results)
    assert df.height == 4
    assert df["action"].to_list() == ["clarify", "answer", "invalid", "invalid"]
    assert df["status"].to_list() == ["ok", "ok", "parse_error", "llm_error"]
    assert df["response"].to_list() == ["fish or guitar?", "bass is a fish.", "Bass can mean a fish.", None]
    errors = df["error"].to_list()
    assert errors[:2] == [None, None]
    assert errors[2] == "reply does not start with a protocol prefix"
    assert errors[3] == "timeout"
    assert df["raw_output"].to_list() == ["The clarifying question is: fish or guitar?",
                                          "**The answer is** bass is a fish.", "Bass can mean a fish.", ""]
    assert df["cached"].to_list() == [False, True, False, False]
    assert df["tokens_in"].to_list()[0] == 3 and df["tokens_out"].to_list()[0] == 4


def test_parse_predictions_all_errors_keeps_string_columns():
    df = parse_predictions([ChatResult(error="x"), ChatResult(error="y")])
    assert df.schema["response"] == pl.Utf8 and df.schema["error"] == pl.Utf8
    assert df["action"].to_list() == ["invalid", "invalid"]
