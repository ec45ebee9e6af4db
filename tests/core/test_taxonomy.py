"""Taxonomy of ClarifyMT-Bench (paper Table 2, §4.2): 5 dimensions, 16 subtypes, 6 personas."""

from collections import Counter

import polars as pl

from dagster_project.core.shared.taxonomy import (
    ACTIONS, DIMENSIONS, PERSONA_BY_KEY, PERSONAS, QUERY_SUBTYPES, SUBTYPE_BY_KEY, SUBTYPES,
    reference_actions, taxonomy_table,
)


def test_sixteen_subtypes_in_five_dimensions():
    assert len(SUBTYPES) == 16
    assert len({s.key for s in SUBTYPES}) == 16
    assert DIMENSIONS == ("linguistic", "intent", "contextual", "epistemic", "interactional")
    counts = Counter(s.dimension for s in SUBTYPES)
    # Paper Table 2: 3 subtypes in each of the four query dimensions, 4 interactional.
    assert counts == {"linguistic": 3, "intent": 3, "contextual": 3, "epistemic": 3, "interactional": 4}


def test_query_and_interactional_split():
    assert len(QUERY_SUBTYPES) == 12
    interactional = [s for s in SUBTYPES if s.interactional]
    assert len(interactional) == 4
    assert all(s.dimension == "interactional" for s in interactional)
    assert all(s.dimension != "interactional" for s in QUERY_SUBTYPES)
    assert {s.key for s in interactional} == {"partial_vague", "factually_wrong", "contradictory", "off_focus"}
    assert [s.key for s in QUERY_SUBTYPES][:3] == ["lexical", "syntactic", "semantic"]
    assert SUBTYPE_BY_KEY["knowledge_gap"].dimension == "epistemic"
    assert SUBTYPE_BY_KEY["temporal"].dimension == "contextual"


def test_six_personas_and_turns():
    assert [p.key for p in PERSONAS] == [
        "precise", "partial_vague", "off_focus", "contradictory", "factually_wrong", "refusal"]
    turns = {p.key: p.turns for p in PERSONAS}
    assert turns == {"precise": 2, "refusal": 2, "partial_vague": 3, "off_focus": 3,
                     "contradictory": 3, "factually_wrong": 3}
    assert PERSONA_BY_KEY["refusal"].name == "Refusal"


def test_reference_actions():
    assert ACTIONS == ("clarify", "answer")
    assert reference_actions(PERSONA_BY_KEY["precise"]) == ["clarify", "answer"]
    assert reference_actions(PERSONA_BY_KEY["refusal"]) == ["clarify", "answer"]
    for key in ("partial_vague", "off_focus", "contradictory", "factually_wrong"):
        assert reference_actions(PERSONA_BY_KEY[key]) == ["clarify", "clarify", "clarify"]


def test_average_turns_matches_paper():
    # (2 + 3 + 3 + 3 + 3 + 2) / 6 = 16 / 6 = 2.666.. -> paper reports 2.67
    avg = sum(len(reference_actions(p)) for p in PERSONAS) / len(PERSONAS)
    assert round(avg, 2) == 2.67
    # 1,020 queries x 16 turns per query = 16,320 evaluated turns (ARCHITECTURE §8)
    assert 1020 * sum(p.turns for p in PERSONAS) == 16320


def test_taxonomy_table():
    t = taxonomy_table()
    assert t.shape == (16, 7)
    assert t.columns == ["subtype", "name", "dimension", "definition", "example",
                         "example_clarification", "interactional"]
    assert t["subtype"].to_list() == [s.key for s in SUBTYPES]
    assert t["interactional"].sum() == 4
    assert t.filter(t["subtype"] == "value")["dimension"].item() == "epistemic"
    assert t.null_count().sum_horizontal().item() == 0


def _constant_method(action: str) -> pl.DataFrame:
    """Every evaluated turn of one query x six personas, predicted with one fixed action."""
    rows = [{"persona": p.key, "turn": t, "reference_action": ref, "action": action}
            for p in PERSONAS for t, ref in enumerate(reference_actions(p), start=1)]
    return pl.DataFrame(rows)


def test_always_ask_and_always_answer_accuracies_follow_the_paper_labelling():
    """§4.2 / Table 4: a model that always asks scores 100% on the four noisy personas (50% on Precise /
    Refusal) and 100% at turn 3; one that always answers scores 0% on the noisy personas and at turn 3."""
    from dagster_project.core.clarifymt.metrics import clarification_metrics

    for action, noisy, settled, turn3 in (("clarify", 1.0, 0.5, 1.0), ("answer", 0.0, 0.5, 0.0)):
        pred = _constant_method(action)
        by_persona = dict(clarification_metrics(pred, ["persona"]).select("persona", "accuracy").iter_rows())
        assert by_persona == {**{k: noisy for k in ("partial_vague", "off_focus", "contradictory", "factually_wrong")},
                              "precise": settled, "refusal": settled}
        by_turn = dict(clarification_metrics(pred, ["turn"]).select("turn", "accuracy").iter_rows())
        assert by_turn[3] == turn3 and by_turn[1] == (1.0 if action == "clarify" else 0.0)
