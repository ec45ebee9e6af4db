"""Names that params.yaml may use for the benchmark's taxonomy: the keys only. core/shared/taxonomy.py holds the
definitions and checks at import that its keys are exactly these, so config/ needs nothing from core/."""

from __future__ import annotations

QUERY_SUBTYPE_KEYS: tuple[str, ...] = (
    "lexical", "syntactic", "semantic", "goal", "scope", "intent_conflict",
    "entity", "spatial", "temporal", "knowledge_gap", "unfamiliarity", "value",
)
PERSONA_KEYS: tuple[str, ...] = (
    "precise", "partial_vague", "off_focus", "contradictory", "factually_wrong", "refusal",
)
