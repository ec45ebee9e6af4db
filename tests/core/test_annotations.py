"""core/annotations.py: candidate sets, answers, CoTAP parsing, the three preference types, TRL formats."""

import json

import polars as pl
import pytest

from dagster_project.core.clarilm.annotations import (
    ANSWER,
    TRL_DPO_COLUMNS,
    TRL_SFT_COLUMNS,
    attach_answers,
    candidate_sets,
    cotap,
    dpo_rows,
    format_response,
    held_out_rows,
    options_block,
    parse_cotap_one,
    preference_pairs,
    sft_rows,
    trl_export,
)
from dagster_project.llm.chat import ChatResult

ANSWER_SCHEMA = {  # the schema sent before the move to LLMTask: part of the cache key, must not change
    "type": "object", "properties": {"answer": {"type": "string", "maxLength": 400}}, "required": ["answer"]}


def cotap_schema(n):
    """CoTAP's schema for n candidates as it was sent before the move to LLMTask."""
    return {"type": "object", "required": ["reasoning", "choice", "rationale"],
            "properties": {"reasoning": {"type": "string", "maxLength": 600},
                           "choice": {"type": "integer", "minimum": 0, "maximum": n},
                           "rationale": {"type": "string", "maxLength": 200}}}


def chat_with(*results):
    """chat(role, requests) answering with `results` in order; `chat.sent` holds the requests."""
    answers = iter(results)
    chat = lambda role, reqs: chat.sent.extend(reqs) or [next(answers) for _ in reqs]  # noqa: E731
    chat.sent = []
    return chat


QUESTIONS = pl.DataFrame({
    "question_id": ["q1", "q2", "q3"],
    "question": ["Recommend a laptop.", "What is the capital of France?", "Plan a trip."],
    "question_source": ["log", "generated", "generated"],
    "log_answer": ["Try a ThinkPad.", None, None],
    "split": ["train", "train", "train"],
})
FACETS = pl.DataFrame({
    "facet_id": ["q1:llm:0", "q1:log:0", "q1:log:1", "q1:log:2", "q2:llm:0"],
    "question_id": ["q1", "q1", "q1", "q1", "q2"],
    "origin": ["llm", "log", "log", "log", "llm"],
    "facet": ["budget", "use", "os", "dup", "country"],
    "clarifying_question": ["What is your budget?", "What will you use it for?", "Which OS?", "x", "Which France?"],
    "kept": [True, True, True, False, True],
})


def _sets(max_candidates=5):
    return candidate_sets(QUESTIONS, FACETS, max_candidates)


def test_candidate_sets_order_cap_and_empty():
    s = _sets(max_candidates=2)
    assert s["question_id"].to_list() == ["q1", "q2", "q3"]
    q1 = s.row(0, named=True)
    assert [c["facet_id"] for c in q1["candidates"]] == ["q1:log:0", "q1:log:1"]  # log first, capped, dup skipped
    assert q1["n_available"] == 3
    assert s.row(2, named=True)["candidates"] == [] and s.row(2, named=True)["n_available"] == 0


def test_answers_from_log_or_answerer():
    s = _sets()
    chat = chat_with(ChatResult(texts=['{"answer": "Paris."}'], model="m"), ChatResult(texts=["nope"], model="m"))
    out = attach_answers(chat, s, 100)
    reqs = chat.sent
    assert [r.messages[-1]["content"].count("capital of France") for r in reqs] == [1, 0]
    assert reqs[0].json_schema == ANSWER_SCHEMA == ANSWER.schema
    assert (reqs[0].sampling.temperature, reqs[0].sampling.max_tokens) == (0.0, 100)
    assert out.select("answer", "answer_source", "answer_status").rows() == [
        ("Try a ThinkPad.", "log", "ok"), ("Paris.", "generated", "ok"), (None, "generated", "parse_error")]


def test_options_and_cotap_request_schema():
    s = attach_answers(chat_with(), _sets().with_columns(log_answer=pl.lit("Try a ThinkPad.")), 100)
    block = options_block("Try a ThinkPad.", s.row(0, named=True)["candidates"])
    assert block.splitlines() == ['0. Answer directly: "Try a ThinkPad."',
                                  '1. Ask: "What will you use it for?" (about: use)', '2. Ask: "Which OS?" (about: os)',
                                  '3. Ask: "What is your budget?" (about: budget)']
    assert options_block(None, []) == "0. Answer directly (no draft answer available)."
    chat = chat_with(*[ChatResult(texts=["{}"], model="m")] * 3)
    cotap(chat, s, 300)
    by_question = {r.messages[-1]["content"].split('User request: "')[1].split('"')[0]: r for r in chat.sent}
    assert by_question["Recommend a laptop."].json_schema == cotap_schema(3)
    assert by_question["Plan a trip."].json_schema == cotap_schema(0)
    assert by_question["Plan a trip."].sampling.max_tokens == 300


CANDS = [{"facet_id": "f1", "facet": "a", "clarifying_question": "A?", "origin": "log"},
         {"facet_id": "f2", "facet": "b", "clarifying_question": "B?", "origin": "llm"}]


@pytest.mark.parametrize("raw,expected", [
    ('{"reasoning": "r", "choice": 2, "rationale": "x"}', ("ok", "ask", "f2", "llm")),
    ('{"reasoning": "r", "choice": 0, "rationale": "x"}', ("ok", "answer", None, "answer")),
    ('{"reasoning": "r", "choice": 3, "rationale": "x"}', ("parse_error", None, None, None)),
    ('{"reasoning": "r", "choice": "1"}', ("parse_error", None, None, None)),
    ("I would ask about A.", ("parse_error", None, None, None)),
])
def test_parse_cotap_one(raw, expected):
    r = parse_cotap_one(raw, CANDS, has_answer=True)
    assert (r["status"], r["decision"], r["chosen_facet_id"], r["chosen_origin"]) == expected


def test_parse_cotap_answer_without_text_is_unusable():
    r = parse_cotap_one('{"reasoning": "r", "choice": 0, "rationale": "x"}', CANDS, has_answer=False)
    assert r["status"] == "parse_error" and "no answer text" in r["error"]


def _annotated():
    s = attach_answers(chat_with(ChatResult(texts=['{"answer": "Paris."}'], model="m"),
                                 ChatResult(texts=["", ""], error="down", model="m")), _sets(), 100)
    # one batch per candidate count: q3 (0 candidates), q2 (1), q1 (3)
    chat = chat_with(ChatResult(texts=[""], error="TimeoutError", model="m"),
                     ChatResult(texts=[json.dumps({"reasoning": "clear", "choice": 0, "rationale": "r"})], model="m"),
                     ChatResult(texts=[json.dumps({"reasoning": "use matters most", "choice": 1, "rationale": "r"})],
                                model="m"))
    return cotap(chat, s, 300)


def test_preference_pairs_three_types():
    cotap = _annotated()
    assert cotap["status"].to_list() == ["ok", "ok", "llm_error"]
    pairs = preference_pairs(cotap, max_question_pairs=1)
    assert pairs.select("pair_id", "type", "chosen_origin", "rejected_origin", "rejected_facet_id").rows() == [
        ("q1:clarify_over_answer:0", "clarify_over_answer", "log", "answer", None),
        ("q1:better_question:0", "better_question", "log", "log", "q1:log:1"),
        ("q2:answer_over_clarify:0", "answer_over_clarify", "answer", "llm", "q2:llm:0"),
    ]
    first = pairs.row(0, named=True)
    assert first["chosen"] == "Need clarification: yes\nWhat will you use it for?"
    assert first["rejected"] == "Need clarification: no\nTry a ThinkPad."
    assert preference_pairs(cotap, max_question_pairs=5).filter(pl.col("type") == "better_question").height == 2
    # an ask decision without an answer text yields only q1 > q2 pairs
    no_answer = cotap.with_columns(answer=pl.lit(None, pl.Utf8))
    assert preference_pairs(no_answer, 1)["type"].to_list() == ["better_question"]


def test_format_response():
    assert format_response("clarify", " Which city? ") == "Need clarification: yes\nWhich city?"
    assert format_response("answer", "Paris.") == "Need clarification: no\nParis."


def test_trl_formats_load_with_datasets(tmp_path):
    from datasets import load_dataset

    cotap = _annotated()
    sft = sft_rows(cotap, "Decide first.")
    assert sft.height == 2
    assert sft.row(0, named=True)["messages"] == [
        {"role": "system", "content": "Decide first."}, {"role": "user", "content": "Recommend a laptop."},
        {"role": "assistant", "content": "Need clarification: yes\nWhat will you use it for?"}]
    dpo = dpo_rows(preference_pairs(cotap, 1), None)
    assert dpo.row(0, named=True)["prompt"] == [{"role": "user", "content": "Recommend a laptop."}]
    sft_path, dpo_path = tmp_path / "sft.jsonl", tmp_path / "dpo.jsonl"
    trl_export(sft, TRL_SFT_COLUMNS).write_ndjson(sft_path)
    trl_export(dpo, TRL_DPO_COLUMNS).write_ndjson(dpo_path)
    s = load_dataset("json", data_files=str(sft_path), split="train", cache_dir=str(tmp_path / "hf"))
    d = load_dataset("json", data_files=str(dpo_path), split="train", cache_dir=str(tmp_path / "hf"))
    assert s.column_names == ["messages"] and s.num_rows == 2
    assert d.column_names == ["prompt", "chosen", "rejected"] and d.num_rows == 3
    # TRL's conversational checks: lists of {role, content}; the last prompt turn is the user's
    assert d[0]["prompt"][-1]["role"] == "user" and d[0]["chosen"][0]["role"] == "assistant"
    assert s[0]["messages"][-1]["role"] == "assistant"


def test_test_questions_are_never_exported_for_training():
    cotap = _annotated().with_columns(split=pl.when(pl.col("question_id") == "q1").then(pl.lit("test"))
                                      .otherwise(pl.lit("train")))
    assert "q1" not in sft_rows(cotap, None)["question_id"].to_list()
    pairs = preference_pairs(cotap, 1)
    assert "q1" in pairs["question_id"].to_list()  # the pairs table keeps every row, with its split
    assert "q1" not in dpo_rows(pairs, None)["question_id"].to_list()
    test = held_out_rows(cotap, "Decide first.")
    assert test.select("question_id", "reference_action", "reference_question").rows() == [
        ("q1", "clarify", "What will you use it for?")]
    assert test["messages"][0].to_list() == [{"role": "system", "content": "Decide first."},
                                             {"role": "user", "content": "Recommend a laptop."}]
