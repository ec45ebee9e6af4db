"""Persona simulation and dialogue assembly (ClarifyMT-Bench §4.2) with a chat answering hand-made ChatResults."""

import json

import polars as pl
import pytest

from dagster_project.core.clarifymt.simulation import simulate
from dagster_project.core.shared.taxonomy import PERSONA_BY_KEY, PERSONAS, reference_actions
from dagster_project.llm.chat import ChatResult
from dagster_project.llm.prompts import load_prompt

# The schemas the simulator has always been sent (part of every cache key and of the llama.cpp grammar).
_TEXT = {"type": "string", "minLength": 2, "maxLength": 160}
TWO_TURN_SCHEMA = {"type": "object", "properties": {"reply": _TEXT}, "required": ["reply"]}
THREE_TURN_SCHEMA = {
    "type": "object",
    "properties": {"reply_1": _TEXT, "follow_up_question": _TEXT, "reply_2": _TEXT},
    "required": ["reply_1", "follow_up_question", "reply_2"],
}

QUERIES = pl.DataFrame({
    "query_id": ["lexical-000"], "subtype": ["lexical"], "query": ["Tell me about bass."],
    "clarifying_question": ["Fish or instrument?"], "missing_info": [["sense"]],
}, schema_overrides={"missing_info": pl.List(pl.Utf8)})

Q, CQ = "Tell me about bass.", "Fish or instrument?"
TWO_OK = json.dumps({"reply": " The fish. "})
THREE_OK = json.dumps({"reply_1": " Kind of both? ", "follow_up_question": " Which one first? ",
                       "reply_2": " The fish. "})


def persona_of(request):
    """The persona a simulator request plays (its name follows "behaviour...: " in the prompt)."""
    (p,) = [p for p in PERSONAS if f": {p.name}. " in request.messages[-1]["content"]]
    return p.key


def _run(personas, outputs, queries=QUERIES):
    """simulate() with outputs[i] the answer to personas[i]; returns the table and {persona: its one request}."""
    by_persona = {p.key: ChatResult(error=o[1], model="sim") if isinstance(o, tuple)
                  else ChatResult(texts=[o], model="sim") for p, o in zip(personas, outputs, strict=True)}
    sent = []

    def chat(role, requests):
        assert role == "user_simulator"
        sent.extend(requests)
        return [by_persona[persona_of(r)] for r in requests]

    df = simulate(chat, queries, personas, temperature=0.7, seed=3)
    assert sorted(persona_of(r) for r in sent) == sorted(p.key for p in personas)  # one request per persona
    return df, {persona_of(r): r for r in sent}


def dialogue(df, persona):
    return df.filter(pl.col("persona") == persona).sort("turn").to_dicts()


def test_simulation_requests():
    df, sent = _run(list(PERSONAS), [TWO_OK if p.turns == 2 else THREE_OK for p in PERSONAS])
    assert df["dialogue_id"].unique(maintain_order=True).to_list() == [f"lexical-000-{p.key}" for p in PERSONAS]
    reqs = [sent[p.key] for p in PERSONAS]
    schemas = [r.json_schema for r in reqs]
    assert schemas == [TWO_TURN_SCHEMA] + [THREE_TURN_SCHEMA] * 4 + [TWO_TURN_SCHEMA]
    assert reqs[0].prompt_version == load_prompt("simulate_two_turn").version
    assert reqs[1].prompt_version == load_prompt("simulate_three_turn").version
    assert all(r.sampling.temperature == 0.7 and r.sampling.seed == 3 and r.sampling.max_tokens == 200 for r in reqs)
    user = reqs[5].messages[-1]["content"]
    assert Q in user and CQ in user and "sense" in user and "Refusal" in user


def test_missing_info_empty_becomes_unspecified():
    q = QUERIES.with_columns(missing_info=pl.lit([], dtype=pl.List(pl.Utf8)))
    _, sent = _run([PERSONA_BY_KEY["precise"]], [TWO_OK], q)
    assert "missing: unspecified" in sent["precise"].messages[-1]["content"]


def test_ok_dialogues_rows_messages_and_references():
    personas = [PERSONA_BY_KEY[k] for k in ("precise", "partial_vague", "refusal", "off_focus")]
    df, sent = _run(personas, [TWO_OK, THREE_OK, TWO_OK, THREE_OK])
    assert df.height == 2 + 3 + 2 + 3
    assert set(df["status"].to_list()) == {"ok"}
    assert df["error"].null_count() == df.height

    precise = dialogue(df, "precise")
    assert [r["turn"] for r in precise] == [1, 2]
    assert [r["n_turns"] for r in precise] == [2, 2]
    assert [r["reference_action"] for r in precise] == ["clarify", "answer"]
    assert [r["reference_question"] for r in precise] == [CQ, None]
    assert precise[0]["messages"] == [{"role": "user", "content": Q}]
    assert precise[1]["messages"] == [{"role": "user", "content": Q}, {"role": "assistant", "content": CQ},
                                      {"role": "user", "content": "The fish."}]
    assert [r["user_utterance"] for r in precise] == [Q, "The fish."]
    assert precise[0]["dialogue_id"] == "lexical-000-precise"
    assert precise[0]["raw_output"] is None and precise[1]["raw_output"] == TWO_OK
    assert precise[1]["prompt_version"] == sent["precise"].prompt_version and precise[1]["model"] == "sim"

    pv = dialogue(df, "partial_vague")
    assert [r["reference_action"] for r in pv] == ["clarify", "clarify", "clarify"]
    assert [r["reference_question"] for r in pv] == [CQ, "Which one first?", None]
    assert [len(r["messages"]) for r in pv] == [1, 3, 5]  # 2 * turn - 1
    assert pv[2]["messages"] == [
        {"role": "user", "content": Q}, {"role": "assistant", "content": CQ},
        {"role": "user", "content": "Kind of both?"}, {"role": "assistant", "content": "Which one first?"},
        {"role": "user", "content": "The fish."},
    ]
    # each turn's prefix extends the previous one
    assert pv[2]["messages"][:3] == pv[1]["messages"] and pv[1]["messages"][:1] == pv[0]["messages"]
    assert [r["subtype"] for r in pv] == ["lexical"] * 3

    assert [r["reference_action"] for r in dialogue(df, "refusal")] == ["clarify", "answer"]
    assert [len(r["messages"]) for r in dialogue(df, "off_focus")] == [1, 3, 5]
    for r in df.to_dicts():
        assert len(r["messages"]) == 2 * r["turn"] - 1
        assert r["messages"][-1]["role"] == "user"


@pytest.mark.parametrize("persona, output, status, error_start", [
    ("contradictory", '{"reply_1": "x", ', "parse_error", "invalid JSON"),
    ("contradictory", json.dumps({"reply_1": "a", "reply_2": "b"}), "parse_error",
     "missing field 'follow_up_question'"),
    ("factually_wrong", ("llm", "connection reset"), "llm_error", "connection reset"),
    ("precise", json.dumps({"reply": ""}), "parse_error", "field 'reply' is empty"),
    ("refusal", json.dumps({"answer": "no"}), "parse_error", "missing field 'reply'"),
    ("refusal", ("llm", "timeout"), "llm_error", "timeout"),
])
def test_failed_simulation_keeps_later_turn_rows(persona, output, status, error_start):
    df, _ = _run([PERSONA_BY_KEY[persona]], [output])
    rows = dialogue(df, persona)
    n = PERSONA_BY_KEY[persona].turns
    assert len(rows) == n
    # turn 1 (the query itself) is still usable
    assert rows[0]["status"] == "ok" and rows[0]["error"] is None
    assert rows[0]["messages"] == [{"role": "user", "content": Q}]
    assert rows[0]["reference_question"] == CQ
    assert rows[0]["raw_output"] is None
    for r in rows[1:]:
        assert r["status"] == status
        assert r["error"].startswith(error_start)
        assert r["messages"] == []
        assert r["user_utterance"] is None and r["reference_question"] is None
        assert r["raw_output"] == ("" if isinstance(output, tuple) else output)
    assert [r["reference_action"] for r in rows] == reference_actions(PERSONA_BY_KEY[persona])
    assert len(rows) == n


def test_mixed_batch_row_count_and_schema():
    personas = list(PERSONAS)
    outputs = [TWO_OK, THREE_OK, "garbage", ("llm", "x"), THREE_OK, TWO_OK]
    df, _ = _run(personas, outputs)
    assert df.height == 16  # 2 + 3 + 3 + 3 + 3 + 2 turns per query
    assert df.filter(pl.col("status") == "ok").height == 2 + 3 + 1 + 1 + 3 + 2
    assert df["dialogue_id"].n_unique() == 6
    assert df.schema["messages"] == pl.List(pl.Struct({"role": pl.Utf8, "content": pl.Utf8}))
    assert df["reference_action"].value_counts().sort("reference_action").rows() == [("answer", 2), ("clarify", 14)]


def test_rows_follow_query_then_persona_order_across_batches():
    """Two- and three-turn personas are simulated in separate batches; rows still come query by query."""
    queries = pl.concat([QUERIES, QUERIES.with_columns(query_id=pl.lit("scope-001"), query=pl.lit("Fix it."))])
    personas = [PERSONA_BY_KEY[k] for k in ("partial_vague", "precise", "off_focus")]
    sent = []

    def chat(role, requests):
        sent.append(len(requests))
        return [ChatResult(texts=[TWO_OK if persona_of(r) == "precise" else THREE_OK]) for r in requests]

    df = simulate(chat, queries, personas, temperature=0.7)
    assert sorted(sent) == [2, 4]
    assert df["dialogue_id"].unique(maintain_order=True).to_list() == [
        f"{q}-{p.key}" for q in ("lexical-000", "scope-001") for p in personas]
    first_turns = df.filter(pl.col("query_id") == "scope-001", pl.col("turn") == 1)
    assert first_turns["user_utterance"].to_list() == ["Fix it."] * 3
    assert set(df["status"]) == {"ok"}
