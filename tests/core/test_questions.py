"""core/questions.py: Q^L extraction and rules, LLM filter parsing, persona/seed files, Q^G plan and dedup."""

import json
from datetime import date

import numpy as np
import polars as pl
import pytest

from dagster_project.io.formats.clarilm_inputs import load_personas, load_seed_questions
from dagster_project.core.clarilm.question_generation import (
    GENERATE,
    TRANSFORM,
    dedup_against,
    generate,
    qg_plan,
    split_counts,
    transform,
)
from dagster_project.core.clarilm.questions import (
    QL_FILTER,
    apply_dedup,
    detect_language,
    first_questions,
    is_english,
    llm_reason,
    ql_filter,
    ql_rules,
)
from dagster_project.llm.chat import ChatResult

# the schemas sent before the move to LLMTask: part of the cache key, must not change
QL_FILTER_SCHEMA = {"type": "object", "properties": {"context_independent": {"type": "boolean"},
                                                     "well_formed": {"type": "boolean"},
                                                     "reason": {"type": "string", "maxLength": 160}},
                    "required": ["context_independent", "well_formed", "reason"]}
QG_SCHEMA = {"type": "object", "required": ["topic", "question"],
             "properties": {"topic": {"type": "string", "maxLength": 60},
                            "question": {"type": "string", "maxLength": 300}}}
TRANSFORM_SCHEMA = {"type": "object", "properties": {"question": {"type": "string", "maxLength": 400}},
                    "required": ["question"]}


def chat_with(*results):
    """chat(role, requests) answering with `results` in order; `chat.sent` holds the requests."""
    answers = iter(results)
    chat = lambda role, reqs: chat.sent.extend(reqs) or [next(answers) for _ in reqs]  # noqa: E731
    chat.sent = []
    return chat


def _raw(*convs):
    rows = []
    for cid, turns, lang in convs:
        rows += [{"conversation_id": cid, "turn_index": i, "role": r, "text": t, "language": lang,
                  "log_date": date(2024, 1, 1), "source": "f"} for i, (r, t) in enumerate(turns)]
    return pl.DataFrame(rows)


def keyword_embed(texts):
    """Texts sharing their first word are the same vector; others orthogonal."""
    words = sorted({t.split()[0].lower() for t in texts})
    out = np.zeros((len(texts), len(words)), dtype=np.float32)
    for i, t in enumerate(texts):
        out[i, words.index(t.split()[0].lower())] = 1.0
    return out


def test_is_english():
    assert is_english("How do I bake bread?", None)
    assert not is_english("Что такое квантовая физика?", None)
    assert is_english("Wie spät ist es?", "english")  # the tag wins over the text
    assert not is_english("How are you?", "German")
    assert not is_english("1234 ???", None)


# Latin-script, (almost) ASCII-only non-English requests: the old "<= 10% non-ASCII letters" rule called
# every one of them English.
LATIN_NOT_ENGLISH = ["Kannst du mir ein Rezept für Apfelkuchen geben", "Comment faire une tarte aux pommes ?",
                     "Come posso imparare a programmare in Python", "Hoe laat is het nu",
                     "Bagaimana cara membuat kue", "Jak napisac list motywacyjny", "Escribe un correo para mi jefe"]


@pytest.mark.parametrize("text", LATIN_NOT_ENGLISH)
def test_latin_script_non_english_is_not_english(text):
    assert not is_english(text, None)
    assert detect_language(text)[0] not in (None, "en")


def test_detect_language_without_letters_is_unknown_and_doubt_keeps_english():
    assert detect_language("1234 ???") == (None, 0.0)
    assert detect_language("Write a poem about the sea")[0] == "en"
    code, score = detect_language("I need a visa.")  # fastText's best guess for this short request is not English
    assert code != "en" and score < 0.5
    assert is_english("I need a visa.", None) and not is_english("I need a visa.", None, min_score=score / 2)


def test_first_questions_and_rules():
    raw = _raw(
        ("a", [("system", "Be brief."), ("user", "Plan a trip to Rome."), ("assistant", "Sure: day 1..."),
               ("user", "more")], "English"),
        ("b", [("user", "x" * 50), ("assistant", "ok")], None),
        ("c", [("user", "Что это?"), ("assistant", "Это тест.")], None),
        ("d", [("user", "Only one turn?")], None),
        ("e", [("assistant", "Hi, how can I help?"), ("user", "Reset my router."), ("assistant", "Unplug it.")], None),
        ("f", [("user", "Book a flight."), ("assistant", "Where are you flying from?"), ("user", "Oslo.")], None),
    )
    first = first_questions(raw)
    assert first.select("question_id", "question", "log_answer", "log_assistant_asked", "n_turns").rows() == [
        ("ql-a", "Plan a trip to Rome.", "Sure: day 1...", False, 3),
        ("ql-b", "x" * 50, "ok", False, 2),
        ("ql-c", "Что это?", "Это тест.", False, 2),
        ("ql-d", "Only one turn?", None, False, 1),
        ("ql-e", "Reset my router.", "Unplug it.", False, 3),
        ("ql-f", "Book a flight.", None, True, 3),  # the assistant clarified: no direct answer in the log
    ]
    ruled = ql_rules(first, max_chars=40, english_only=True, min_turns=2)
    assert ruled["rule_reason"].to_list() == [None, "too_long", "not_english", "single_turn", None, None]
    assert ql_rules(first, 40, False, 1)["rule_reason"].to_list() == [None, "too_long", None, None, None, None]


def test_ql_filter_parsing_and_reasons():
    rows = pl.DataFrame({"question": ["q1", "q2", "q3", "q4", "q5"]})
    chat = chat_with(
        ChatResult(texts=['{"context_independent": true, "well_formed": true, "reason": "fine"}'], model="m"),
        ChatResult(texts=['{"context_independent": false, "well_formed": true, "reason": "refers back"}'], model="m"),
        ChatResult(texts=['{"context_independent": true, "well_formed": false, "reason": "cut off"}'], model="m"),
        ChatResult(texts=['{"context_independent": "yes"}'], model="m"),
        ChatResult(texts=[""], error="TimeoutError", model="m"),
    )
    parsed = ql_filter(chat, rows)
    reqs = chat.sent
    assert '"q1"' in reqs[0].messages[-1]["content"] and reqs[0].json_schema["required"][0] == "context_independent"
    assert reqs[0].json_schema == QL_FILTER_SCHEMA == QL_FILTER.schema
    assert (reqs[0].sampling.temperature, reqs[0].sampling.max_tokens) == (0.0, 120)
    assert parsed["status"].to_list() == ["ok", "ok", "ok", "parse_error", "llm_error"]
    reasons = parsed.with_columns(r=llm_reason())["r"].to_list()
    assert reasons == [None, "context_dependent", "not_well_formed", "parse_error", "llm_error"]
    assert parsed["raw_output"][4] is None and parsed["filter_reason"][1] == "refers back"


def test_apply_dedup_only_among_candidates():
    rows = pl.DataFrame({"question_id": ["q1", "q2", "q3", "q4"],
                         "question": ["laptop please", "laptop for me", "weather now", "laptop too"],
                         "reject_reason": [None, None, None, "too_long"]})
    out, search = apply_dedup(rows, pl.col("reject_reason").is_null(), "question", keyword_embed, 0.9, 2)
    assert search == {"dedup_method": "exact", "dedup_candidates": 3, "dedup_verified_pairs": 1}
    assert out.select("question_id", "kept", "duplicate_of", "reject_reason").rows() == [
        ("q1", True, None, None), ("q2", False, "q1", "duplicate"), ("q3", True, None, None),
        ("q4", False, None, "too_long")]


def test_personas_and_seed_files(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text('{"persona_id": "a", "description": "A cook."}\n\n{"persona_id": "b", "description": "A pilot."}\n')
    assert load_personas(p)["persona_id"].to_list() == ["a", "b"]
    p.write_text('{"persona_id": "a", "description": "A cook."}\n{"persona_id": "b"}\n')
    with pytest.raises(ValueError, match=r"p\.jsonl, record 2, field 'description'"):
        load_personas(p)
    p.write_text('{"persona_id": "a", "description": "x"}\n{"persona_id": "a", "description": "y"}\n')
    with pytest.raises(ValueError, match="duplicate persona_id"):
        load_personas(p)
    t = tmp_path / "s.txt"
    t.write_text("How tall is Everest?\n\nBook a flight\n")
    j = tmp_path / "s.jsonl"
    j.write_text('{"question": "Find a dentist"}\n')
    assert load_seed_questions([str(t), str(j)]) == ["How tall is Everest?", "Book a flight", "Find a dentist"]
    j.write_text('{"text": "no question field"}\n')
    with pytest.raises(ValueError, match=r"s\.jsonl, record 1, field 'question'"):
        load_seed_questions([str(j)])


def test_split_counts_largest_remainder():
    assert split_counts(8, (0.8, 0.1, 0.1)) == {"keep": 6, "enrich": 1, "simplify": 1}
    assert split_counts(10, (0.8, 0.1, 0.1)) == {"keep": 8, "enrich": 1, "simplify": 1}
    assert split_counts(3, (0.8, 0.1, 0.1)) == {"keep": 3, "enrich": 0, "simplify": 0}
    assert sum(split_counts(124_000, (0.8, 0.1, 0.1)).values()) == 124_000


def test_qg_plan_requests_and_parsing():
    personas = pl.DataFrame({"persona_id": ["nurse", "cook", "pilot"], "description": ["A nurse.", "A cook.", "P"]})
    plan = qg_plan(personas, n_personas=2, per_persona=5, demo_pool=["d1", "d2", "d3", "d4"], n_demos=2,
                   shares=(0.8, 0.1, 0.1), seed=1)
    assert plan.height == 10 and set(plan["persona_id"]) == {"nurse", "cook"}
    assert plan["transformation"].value_counts().sort("transformation").rows() == [
        ("enrich", 1), ("keep", 8), ("simplify", 1)]
    assert all(len(d) == 2 and set(d) <= {"d1", "d2", "d3", "d4"} for d in plan["demos"])
    assert plan.equals(qg_plan(personas, 2, 5, ["d1", "d2", "d3", "d4"], 2, (0.8, 0.1, 0.1), seed=1))
    chat = chat_with(*[ChatResult(texts=[json.dumps({"topic": "t", "question": f"question {i}"})], model="m")
                       for i in range(9)], ChatResult(texts=["nope"], model="m"))
    rows = generate(chat, plan, 0.9)
    reqs = chat.sent
    assert "A nurse." in reqs[0].messages[-1]["content"] and "- d" in reqs[0].messages[-1]["content"]
    assert len({r.sampling.seed for r in reqs}) == 10  # distinct seeds: no 10 identical samples
    assert reqs[0].json_schema == QG_SCHEMA == GENERATE.schema
    assert (reqs[3].sampling.temperature, reqs[3].sampling.seed, reqs[3].sampling.max_tokens) == (0.9, 3, 160)
    assert rows["status"].to_list() == ["ok"] * 9 + ["parse_error"]
    todo = rows.filter((pl.col("status") == "ok") & (pl.col("transformation") != "keep"))
    tchat = chat_with(*[ChatResult(texts=['{"question": "rewritten"}'], model="m")] * todo.height)
    out = transform(tchat, rows)
    assert len(tchat.sent) == todo.height and tchat.sent[0].json_schema == TRANSFORM_SCHEMA == TRANSFORM.schema
    changed = out.filter(pl.col("transform_status") == "ok")
    assert changed["question"].to_list() == ["rewritten"] * todo.height
    assert (changed["original_question"] != changed["question"]).all()
    kept = out.filter(pl.col("transformation") == "keep", pl.col("status") == "ok")
    assert (kept["question"] == kept["original_question"]).all()


def test_transform_failure_keeps_the_original():
    rows = pl.DataFrame({"qg_id": ["g1"], "original_question": ["Fix my bike"], "transformation": ["enrich"],
                         "status": ["ok"]})
    chat = chat_with(ChatResult(texts=["{}"], model="m"))
    out = transform(chat, rows)
    assert "Add one or two concrete details" in chat.sent[0].messages[-1]["content"]
    assert (chat.sent[0].sampling.temperature, chat.sent[0].sampling.max_tokens) == (0.7, 200)
    assert (out["question"][0], out["transform_status"][0]) == ("Fix my bike", "parse_error")


def test_dedup_against_ql_prefers_log_questions():
    ql = pl.DataFrame({"question_id": ["ql-1"], "question": ["laptop advice please"]})
    qg = pl.DataFrame({"qg_id": ["g1", "g2", "g3", "g4"],
                       "question": ["laptop for gaming", "garden tips", "garden ideas", None],
                       "status": ["ok", "ok", "ok", "parse_error"]})
    out, search = dedup_against(qg, ql, keyword_embed, 0.9, 1)  # block=1: every pair crosses a block boundary
    assert search["dedup_method"] == "exact"
    assert out.select("qg_id", "kept", "duplicate_of", "reject_reason").rows() == [
        ("g1", False, "ql-1", "duplicate_of_ql"), ("g2", True, None, None),
        ("g3", False, "g2", "duplicate"), ("g4", False, None, "parse_error")]
