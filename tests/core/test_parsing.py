"""Response-prefix protocol (ClarifyMT-Bench Fig. 7c, ARCHITECTURE §7) and JSON-reply parsing."""

import pytest

from dagster_project.llm.parsing import parse_json_object, require_fields
from dagster_project.llm.protocol import parse_decision


@pytest.mark.parametrize("raw, action, text", [
    ("The answer is 42.", "answer", "42."),
    ("The clarifying question is: which city?", "clarify", "which city?"),
    ("the ANSWER is 42", "answer", "42"),
    ("THE CLARIFYING QUESTION IS which one?", "clarify", "which one?"),
    ("   The   answer\n  is   Paris  ", "answer", "Paris"),
    ("**The answer is** Paris", "answer", "Paris"),
    ("**The clarifying question is:** Do you mean the fish?", "clarify", "Do you mean the fish?"),
    ("\"The answer is Paris", "answer", "Paris"),
    ("'The clarifying question is - which year?'", "clarify", "which year?'"),
    ("Assistant: The answer is yes", "answer", "yes"),
    ("assistant : the clarifying question is: when?", "clarify", "when?"),
    ("**Assistant:** The Clarifying Question is: which one?", "clarify", "which one?"),
    ("> The answer is: yes", "answer", "yes"),
    ("The answer is: \n\nLine one.\nLine two.", "answer", "Line one.\nLine two."),
])
def test_parse_decision_tolerates_messy_prefix(raw, action, text):
    d = parse_decision(raw)
    assert d.action == action
    assert d.text == text


@pytest.mark.parametrize("raw", [
    "", "   ", None,
    "I think the answer is 42.",
    "Sure! The clarifying question is: which city?",
    "Answer: 42",
    "Clarifying question: which city?",
    "The answers is 42",
    "The answer isn't clear yet.",  # "isn't" is not the phrase "is"
    "The clarifying question isn't needed; Paris.",
    "The answer issue is open",
    "The answeris 42",
    "The clarifying questions is which?",
])
def test_parse_decision_invalid(raw):
    d = parse_decision(raw)
    assert d.action == "invalid"
    assert d.text == (raw or "").strip()


def test_parse_decision_first_prefix_wins():
    # The reply opens with the answer prefix; a clarifying phrase later does not change the action.
    d = parse_decision("The answer is: the clarifying question is irrelevant")
    assert d.action == "answer"
    assert d.text == "the clarifying question is irrelevant"
    d = parse_decision("The clarifying question is: is the answer is 42 ok?")
    assert d.action == "clarify"


def test_parse_decision_bare_prefix():
    assert parse_decision("The answer is").action == "answer"
    assert parse_decision("The answer is").text == ""


# ---------------------------------------------------------------- parse_json_object

def test_json_plain():
    assert parse_json_object('{"a": 1, "b": "x"}') == ({"a": 1, "b": "x"}, None)


def test_json_fenced():
    raw = 'Here you go:\n```json\n{"query": "q", "n": [1, 2]}\n```\nHope that helps {sic}'
    assert parse_json_object(raw) == ({"query": "q", "n": [1, 2]}, None)
    assert parse_json_object('```\n{"a": true}\n```') == ({"a": True}, None)
    assert parse_json_object('```JSON\n{"a": null}\n```') == ({"a": None}, None)


def test_json_with_chatter_around():
    raw = 'Sure! Here is the JSON: {"reply": "hi {there}"} -- let me know.'
    assert parse_json_object(raw) == ({"reply": "hi {there}"}, None)


def test_json_nested_object():
    obj, err = parse_json_object('x {"a": {"b": [1, {"c": 2}]}} y')
    assert err is None and obj == {"a": {"b": [1, {"c": 2}]}}


@pytest.mark.parametrize("raw, kind", [("[1, 2, 3]", "list"), ('"just a string"', "str"),
                                       ("42", "int"), ('[{"a": 1}, {"b": 2}]', "list")])
def test_json_not_an_object(raw, kind):
    obj, err = parse_json_object(raw)
    assert obj is None
    assert err == f"expected a JSON object, got {kind}"


@pytest.mark.parametrize("raw", ['{"a": 1,}', '{"a": 1', "{'a': 1}", 'prefix {"a": } suffix', "hello"])
def test_json_broken_gives_reason(raw):
    obj, err = parse_json_object(raw)
    assert obj is None
    assert err and err.startswith("invalid JSON")


@pytest.mark.parametrize("raw", ["", "   \n", None])
def test_json_empty(raw):
    assert parse_json_object(raw) == (None, "empty output")


# ---------------------------------------------------------------- require_fields

FIELDS = {"query": str, "score": int, "items": list}


def test_require_fields_ok():
    assert require_fields({"query": "q", "score": 3, "items": [], "extra": 1}, FIELDS) is None


def test_require_fields_missing():
    assert require_fields({"query": "q", "items": []}, FIELDS) == "missing field 'score'"


def test_require_fields_wrong_type():
    err = require_fields({"query": "q", "score": "3", "items": []}, FIELDS)
    assert err == "field 'score' should be int, got str"
    err = require_fields({"query": "q", "score": 3, "items": "a, b"}, FIELDS)
    assert err == "field 'items' should be list, got str"
    assert require_fields({"query": "q", "score": 3.0, "items": []}, FIELDS) == \
        "field 'score' should be int, got float"


def test_require_fields_bool_is_not_int():
    assert require_fields({"query": "q", "score": True, "items": []}, FIELDS) == \
        "field 'score' should be int, got bool"
    assert require_fields({"flag": False}, {"flag": bool}) is None


@pytest.mark.parametrize("value", ["", "   ", "\n\t"])
def test_require_fields_empty_string(value):
    assert require_fields({"query": value, "score": 1, "items": []}, FIELDS) == "field 'query' is empty"


def test_require_fields_checks_in_order():
    # the first failing field is reported
    assert require_fields({}, FIELDS) == "missing field 'query'"
