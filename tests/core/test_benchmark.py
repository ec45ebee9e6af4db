"""Single-turn generation / rating (ClarifyMT-Bench §4.1) with a chat that replays hand-made ChatResults."""

import json

import polars as pl
import pytest

from dagster_project.core.clarifymt.benchmark import TOPICS, generate, generation_plan, rate
from dagster_project.core.shared.taxonomy import SUBTYPE_BY_KEY
from dagster_project.llm.chat import ChatResult
from dagster_project.llm.prompts import load_prompt

LEX, SCOPE = SUBTYPE_BY_KEY["lexical"], SUBTYPE_BY_KEY["scope"]

# The schemas the steps have always sent (part of every cache key and of the llama.cpp grammar).
GENERATION_SCHEMA = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 8, "maxLength": 200},
        "clarifying_question": {"type": "string", "minLength": 8, "maxLength": 200},
        "missing_info": {"type": "array", "items": {"type": "string", "maxLength": 40}, "minItems": 1, "maxItems": 4},
        "explanation": {"type": "string", "maxLength": 200},
    },
    "required": ["query", "clarifying_question", "missing_info", "explanation"],
}
RATING_SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 5},
                   "reason": {"type": "string", "maxLength": 160}},
    "required": ["score", "reason"],
}


def replay(results, sent):
    """A chat that records (role, request) and answers with `results` (or results(request)), in order."""
    def chat(role, requests):
        sent.extend((role, r) for r in requests)
        return [results(r) for r in requests] if callable(results) else list(results)
    return chat


def test_generation_plan():
    plan = generation_plan([LEX, SCOPE], 3)
    assert plan.columns == ["subtype", "sample", "topic_hint"]
    assert plan["subtype"].to_list() == ["lexical"] * 3 + ["scope"] * 3
    assert plan["sample"].to_list() == [0, 1, 2, 0, 1, 2]
    # topic = TOPICS[(i + 5k) % 18]: lexical (k=0) -> 0, 1, 2; scope (k=1) -> 5, 6, 7
    assert plan["topic_hint"].to_list() == ["travel", "cooking", "personal finance",
                                            "school homework", "shopping", "home repair"]
    assert generation_plan([LEX], 20)["topic_hint"][18] == TOPICS[0]  # wraps around
    assert generation_plan([], 3).height == 0


def test_generation_requests():
    plan = generation_plan([LEX, SCOPE], 2)
    sent = []
    generate(replay(lambda r: ChatResult(texts=[GOOD]), sent), plan, SUBTYPE_BY_KEY, temperature=0.9, seed=10)
    assert {role for role, _ in sent} == {"generator"}
    reqs = [r for _, r in sent]
    assert len(reqs) == 4
    assert all(r.sampling.max_tokens == 320 and r.sampling.n == 1 and r.sampling.top_p is None for r in reqs)
    assert [r.sampling.seed for r in reqs] == [10, 11, 10, 11]
    assert all(r.sampling.temperature == 0.9 for r in reqs)
    assert all(r.json_schema == GENERATION_SCHEMA for r in reqs)
    assert reqs[0].prompt_version == load_prompt("generate_single_turn").version
    user = reqs[2].messages[-1]["content"]
    assert "scope ambiguity" in user and SCOPE.example in user and "school homework" in user
    assert reqs[0].messages[0]["role"] == "system"


GOOD = json.dumps({"query": "  Tell me about bass. ", "clarifying_question": " Fish or guitar? ",
                   "missing_info": ["sense", "  ", "topic "], "explanation": ""})


def _generate(texts_or_errors):
    plan = generation_plan([LEX], len(texts_or_errors))
    results = [ChatResult(error=x[1], model="m") if isinstance(x, tuple) else ChatResult(texts=[x], model="m")
               for x in texts_or_errors]
    sent = []
    return generate(replay(results, sent), plan, SUBTYPE_BY_KEY, temperature=0.9), [r for _, r in sent]


def test_parse_generation_statuses():
    broken = '{"query": "q", "clarifying_question": '
    missing = json.dumps({"query": "A long enough query", "missing_info": ["x"]})
    wrong_type = json.dumps({"query": "q", "clarifying_question": "cq", "missing_info": "x, y"})
    fenced = "Sure:\n```json\n" + json.dumps({"query": "Q", "clarifying_question": "C",
                                              "missing_info": ["a"], "explanation": "why"}) + "\n```"
    df, reqs = _generate([GOOD, broken, ("llm", "timeout after 120s"), missing, wrong_type, fenced])
    assert df.height == 6
    assert df["status"].to_list() == ["ok", "parse_error", "llm_error", "parse_error", "parse_error", "ok"]
    assert df["query_id"].to_list() == [f"lexical-{i:03d}" for i in range(6)]
    rows = df.to_dicts()

    ok = rows[0]
    assert ok["query"] == "Tell me about bass."
    assert ok["clarifying_question"] == "Fish or guitar?"
    assert ok["missing_info"] == ["sense", "topic"]
    assert ok["explanation"] is None  # empty explanation -> null
    assert ok["error"] is None
    assert ok["raw_output"] == GOOD
    assert ok["model"] == "m"
    assert ok["prompt_version"] == reqs[0].prompt_version

    assert rows[1]["error"].startswith("invalid JSON")
    assert rows[1]["raw_output"] == broken and rows[1]["query"] is None and rows[1]["missing_info"] == []
    assert rows[2]["error"] == "timeout after 120s" and rows[2]["raw_output"] == ""
    assert rows[3]["error"] == "missing field 'clarifying_question'"
    assert rows[4]["error"] == "field 'missing_info' should be list, got str"
    assert rows[5]["query"] == "Q" and rows[5]["explanation"] == "why"
    assert df.schema["missing_info"] == pl.List(pl.Utf8)


def test_parse_generation_all_failed_keeps_schema():
    df, _ = _generate([("llm", "down"), ("llm", "down")])
    assert df["status"].to_list() == ["llm_error", "llm_error"]
    assert df.schema["query"] == pl.Utf8 and df.schema["raw_output"] == pl.Utf8


def test_parse_generation_length_mismatch_raises():
    plan = generation_plan([LEX], 2)
    with pytest.raises(ValueError):
        generate(replay([ChatResult(texts=[GOOD])], []), plan, SUBTYPE_BY_KEY, temperature=0.9)


def test_rating_requests():
    rows = pl.DataFrame({"subtype": ["lexical"], "query": ["What is bass?"], "clarifying_question": ["Fish?"]})
    sent = []
    rate(replay([ChatResult(texts=['{"score": 3}'])], sent), rows, SUBTYPE_BY_KEY)
    ((role, req),) = sent
    assert role == "judge"
    assert req.json_schema == RATING_SCHEMA
    assert req.sampling.temperature == 0.0 and req.sampling.max_tokens == 120 and req.sampling.seed is None
    assert "What is bass?" in req.messages[-1]["content"] and "Fish?" in req.messages[-1]["content"]
    assert req.prompt_version == load_prompt("rate_single_turn").version


def test_parse_ratings():
    texts = [
        '{"score": 4, "reason": "fluent"}',
        'Rating: ```json\n{"score": 1, "reason": "bad"}\n```',
        '{"score": 7, "reason": "too high"}',
        '{"score": 0}',
        '{"score": "4", "reason": "string"}',
        '{"score": true}',
        '{"score": 4.0}',
        '{"reason": "no score"}',
        "not json",
    ]
    results = [ChatResult(texts=[t]) for t in texts] + [ChatResult(error="rate limited")]
    rows = pl.DataFrame({"subtype": ["scope"] * len(results), "query": ["q"] * len(results),
                         "clarifying_question": ["c"] * len(results)})
    df = rate(replay(results, []), rows, SUBTYPE_BY_KEY)
    assert df.columns == ["quality", "quality_reason", "quality_status", "quality_raw"]
    assert df["quality"].to_list() == [4, 1] + [None] * 8
    assert df["quality_status"].to_list() == ["ok", "ok"] + ["parse_error"] * 7 + ["llm_error"]
    assert df["quality_reason"].to_list() == ["fluent", "bad"] + [None] * 8
    assert df["quality_raw"].to_list() == texts + [""]


def test_parse_ratings_empty():
    sent = []
    df = rate(replay([], sent), pl.DataFrame(schema={"subtype": pl.Utf8, "query": pl.Utf8,
                                                    "clarifying_question": pl.Utf8}), SUBTYPE_BY_KEY)
    assert sent == []
    assert df.height == 0 and df.schema["quality"] == pl.Int64
