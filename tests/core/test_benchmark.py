"""Single-turn generation / rating (ClarifyMT-Bench §4.1) with a chat that replays hand-made ChatResults."""

import json
from collections import Counter
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from dagster_project.config import BenchmarkConfig, ParamsError, parse_params
from dagster_project.core.clarifymt.benchmark import (
    TOPICS,
    assign_roles,
    generate,
    generation_plan,
    place_seeds,
    rate,
    seed_items,
    single_turn_queries,
)
from dagster_project.core.clarifymt.external import import_dataset
from dagster_project.core.shared.taxonomy import SUBTYPE_BY_KEY
from dagster_project.io.records import InputFileError
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


# ----------------------------------------------------------------- data sources (paper §4.1, App. B)

CLAMBER_SAMPLE = str(Path(__file__).resolve().parents[2] / "data/external/clamber_sample.jsonl")


def test_assign_roles_apportions_by_share_in_seeded_order():
    shares = [("generator", 0.5), ("generator:b", 0.25), ("generator:c", 0.25)]
    roles = assign_roles(22, shares, seed=3)
    assert len(roles) == 22 and Counter(roles) == {"generator": 11, "generator:b": 6, "generator:c": 5}
    assert roles == assign_roles(22, shares, seed=3) and roles != assign_roles(22, shares, seed=4)
    assert assign_roles(3, [("generator", 1.0)], 0) == ["generator"] * 3


def test_seed_items_map_clamber_subclasses_and_take_free_slots():
    turns = import_dataset("clamber", "clamber", CLAMBER_SAMPLE).turns
    seeds = seed_items(turns, ["entity", "temporal", "lexical"], 5, seed=0)
    # the sample's two clarify items: "whom" -> entity, "when" -> temporal; answer items are never seeds
    assert sorted(seeds["subtype"]) == ["entity", "temporal"]
    assert set(seeds["clarifying_question"]) == {"Which tower do you mean?",
                                                 "Which day of the conference do you want the schedule for?"}
    plan = generation_plan([SUBTYPE_BY_KEY["entity"], LEX], 2)
    rest, placed = place_seeds(plan, seeds, "clamber")
    # entity's last slot is taken; temporal has no slot in this plan, so its item is left out
    assert placed["query_id"].to_list() == ["entity-001"] and placed["source"].to_list() == ["clamber"]
    assert rest.height == 3 and "entity-001" not in {f"{r['subtype']}-{r['sample']:03d}" for r in rest.to_dicts()}


def test_single_turn_queries_records_source_and_sends_each_role_its_share():
    cfg = BenchmarkConfig(n_per_subtype=10, subtypes=["entity", "lexical"],
                          generators=[{"role": "generator", "share": 0.5}, {"role": "generator:b", "share": 0.5}],
                          seed_dataset={"path": CLAMBER_SAMPLE, "share": 0.05})
    sent = []

    def answer(req):
        if "score" in (req.json_schema or {}).get("properties", {}):
            return ChatResult(texts=['{"score": 4, "reason": "ok"}'])
        return ChatResult(texts=[json.dumps({"query": f"request {len(sent)} about a thing?",
                                             "clarifying_question": "Which thing?", "missing_info": ["which"]})])

    def embed(texts):
        return np.eye(len(texts), dtype=np.float32)

    out, meta = single_turn_queries(replay(answer, sent), cfg, embed)
    assert out.height == 20 and out["query_id"].n_unique() == 20
    by_source = dict(out.group_by("source").len().iter_rows())
    assert by_source == {"clamber": 1, "generator": 10, "generator:b": 9}  # round(5% of 20) = 1 seed item
    assert Counter(role for role, _ in sent) == {"generator": 10, "generator:b": 9, "judge": 20}
    seed = out.filter(pl.col("source") == "clamber").row(0, named=True)
    assert seed["query"] == "How tall is the tower?" and seed["query_id"] == "entity-009" and seed["quality"] == 4
    assert meta["seed_items_used"] == 1 and meta["source/clamber"] == 1
    # the metadata says how dedup found its pairs: u unique texts <= dedup_exact_max, so all u(u-1)/2 pairs exactly
    u = out.filter(pl.col("dedup_reason").ne_missing("exact")).height
    assert u > 1 and (meta["dedup_method"], meta["dedup_candidates"]) == ("exact", u * (u - 1) // 2)


def test_generator_shares_must_sum_to_one_and_name_a_generator_role():
    with pytest.raises(ParamsError, match="benchmark.generators: shares must sum to 1"):
        parse_params({"benchmark": {"generators": [{"role": "generator", "share": 0.5}]}})
    with pytest.raises(ParamsError, match="benchmark.generators: role 'judge'"):
        parse_params({"benchmark": {"generators": [{"role": "judge", "share": 1.0}]}})
    p = parse_params({"llm": {"roles": {"default": {}, "generator:b": {"model": "other"}}},
                      "benchmark": {"generators": [{"role": "generator:b", "share": 1.0}]}})
    assert p.llm.role("generator:b").model == "other"
    assert p.llm.role("generator:c").model == p.llm.role("default").model


def test_missing_seed_dataset_names_the_params_key(tmp_path):
    cfg = BenchmarkConfig(subtypes=["lexical"], seed_dataset={"path": str(tmp_path / "nope.jsonl")})
    with pytest.raises(InputFileError, match="benchmark.seed_dataset.path"):
        single_turn_queries(replay([], []), cfg, lambda t: np.eye(len(t)))
