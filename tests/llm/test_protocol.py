"""Response-prefix protocol (ClarifyMT-Bench Fig. 7c, ARCHITECTURE §7)."""

import pytest

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
