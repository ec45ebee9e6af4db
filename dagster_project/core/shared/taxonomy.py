"""ClarifyMT-Bench ambiguity taxonomy: 5 dimensions, 16 subtypes (12 query + 4 interactional), 6 personas."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from dagster_project.config.names import PERSONA_KEYS, QUERY_SUBTYPE_KEYS


@dataclass(frozen=True)
class Subtype:
    key: str
    name: str
    dimension: str
    definition: str
    example: str
    example_clarification: str
    interactional: bool = False


@dataclass(frozen=True)
class Persona:
    key: str
    name: str
    behaviour: str
    turns: int  # evaluated turns in a dialogue: 2 when the first reply settles it, else 3


DIMENSIONS = ("linguistic", "intent", "contextual", "epistemic", "interactional")

SUBTYPES: tuple[Subtype, ...] = (
    Subtype("lexical", "Lexical", "linguistic", "A word in the request has several senses.",
            "What can you tell me about bass?", "Do you mean the fish or the low-pitched instrument?"),
    Subtype("syntactic", "Syntactic", "linguistic", "The sentence can be parsed in more than one way.",
            "Find reviews of laptops by students from Germany.",
            "Reviews written by German students, or laptops made in Germany?"),
    Subtype("semantic", "Semantic", "linguistic", "The criterion or semantic role in the request is unclear.",
            "Which is the biggest airline?", "Biggest by fleet size, passengers carried or revenue?"),
    Subtype("goal", "Goal", "intent", "What the user ultimately wants is vague or incomplete.",
            "Help me with my presentation.", "Do you need slides, a script, or feedback on delivery?"),
    Subtype("scope", "Scope", "intent", "How broad or deep the task should be is unclear.",
            "Explain machine learning.", "A short intuitive overview, or a technical explanation with maths?"),
    Subtype("intent_conflict", "Intent conflict", "intent", "The request contains goals that cannot all hold.",
            "Give me a one-line summary that covers every chapter in detail.",
            "Should I favour brevity or completeness?"),
    Subtype("entity", "Entity", "contextual", "A name or term could refer to several things.",
            "When was Jordan born?", "Michael Jordan the athlete, the country, or someone else named Jordan?"),
    Subtype("spatial", "Spatial", "contextual", "The place the request depends on is missing.",
            "How long does the train take?", "From which station to which destination?"),
    Subtype("temporal", "Temporal", "contextual", "The time the request depends on is missing.",
            "Is the museum open?", "For which day and time would you like to know?"),
    Subtype("knowledge_gap", "Knowledge gap", "epistemic", "The user assumes context the assistant does not share.",
            "Can you update the numbers we discussed?", "Which numbers do you mean? I don't have our earlier context."),
    Subtype("unfamiliarity", "Unfamiliarity", "epistemic", "The request names something the model may not know or that may not exist.",
            "What's the battery life of the Apple Galaxy Pro?",
            "Did you mean an Apple device or a Samsung Galaxy model?"),
    Subtype("value", "Value", "epistemic", "A subjective term is used without criteria.",
            "Suggest a nice place to eat.", "What makes a place nice for you: cuisine, price, or atmosphere?"),
    Subtype("partial_vague", "Partial / vague reply", "interactional", "The user's reply is uncertain or imprecise.",
            "Maybe, kind of.", "Which part do you agree with?", interactional=True),
    Subtype("factually_wrong", "Factually wrong reply", "interactional", "The user's reply contains a clear factual error.",
            "Sydney is the capital of Australia.", "Do you mean Sydney, or the capital Canberra?", interactional=True),
    Subtype("contradictory", "Contradictory reply", "interactional", "The user's reply conflicts with itself or earlier turns.",
            "Make it formal. Actually keep it casual, but formal.",
            "Should the tone be formal or casual?", interactional=True),
    Subtype("off_focus", "Off-focus reply", "interactional", "The user's reply ignores the clarifying question.",
            "By the way, what's your favourite colour?",
            "Happy to chat about that, but first: which option did you want?", interactional=True),
)

QUERY_SUBTYPES: tuple[Subtype, ...] = tuple(s for s in SUBTYPES if not s.interactional)

PERSONAS: tuple[Persona, ...] = (
    Persona("precise", "Precise", "Gives exactly the missing details, specific and correct.", 2),
    Persona("partial_vague", "Partial-Vague", "Answers only partly and vaguely, so the request stays undecidable.", 3),
    Persona("off_focus", "Off-Focus", "Replies with something unrelated to the clarifying question.", 3),
    Persona("contradictory", "Contradictory", "Says things that conflict with each other or with earlier turns.", 3),
    Persona("factually_wrong", "Factually-Wrong", "Gives specific details that are factually wrong.", 3),
    Persona("refusal", "Refusal", "Declines to add detail and tells the assistant to just go ahead.", 2),
)

SUBTYPE_BY_KEY = {s.key: s for s in SUBTYPES}
PERSONA_BY_KEY = {p.key: p for p in PERSONAS}
ACTIONS = ("clarify", "answer")


if tuple(s.key for s in QUERY_SUBTYPES) != QUERY_SUBTYPE_KEYS or tuple(p.key for p in PERSONAS) != PERSONA_KEYS:
    raise ImportError("core/shared/taxonomy.py and config/names.py disagree on the subtype or persona keys")

ANSWER_AFTER_ONE_REPLY = frozenset({"precise", "refusal"})
"""Personas whose one reply permits an answer (paper §4.2); the four noisy personas stay noisy in every reply."""


def reference_actions(persona: Persona) -> list[str]:
    """Reference action per evaluated turn (ClarifyMT-Bench §4.2): the first query is ambiguous (clarify);
    Precise and Refusal users permit an answer after one reply; the noisy personas never give what is missing,
    so every one of their turns is clarify (Table 4's turn-3 scores only fit this labelling)."""
    if persona.key in ANSWER_AFTER_ONE_REPLY:
        return ["clarify"] * (persona.turns - 1) + ["answer"]
    return ["clarify"] * persona.turns


def taxonomy_table() -> pl.DataFrame:
    """The 16 subtypes as a table (the `benchmark.taxonomy` asset)."""
    return pl.DataFrame(
        [
            {
                "subtype": s.key, "name": s.name, "dimension": s.dimension, "definition": s.definition,
                "example": s.example, "example_clarification": s.example_clarification,
                "interactional": s.interactional,
            }
            for s in SUBTYPES
        ]
    )
