"""Intent-classification metrics (Appendices D/E): ambiguity resolution score, turn quality, SDRS."""

from __future__ import annotations

PREDICTION_ACTIONS = frozenset({"intent", "out_of_domain"})  # a final answer: an intent name or "out of domain"


def ambiguity_resolution_score(action: str, enough_info: bool) -> int:
    """ars_i, Appendix D: predicting with enough information = 1, asking without it = 1, otherwise 0.

    `action` is "intent" / "out_of_domain" (a prediction) or "clarify"; anything else (an unusable reply)
    scores 0 whatever the information state.
    """
    if action in PREDICTION_ACTIONS:
        return int(bool(enough_info))
    if action == "clarify":
        return int(not enough_info)
    return 0


# Appendix E: the judge's label for each criterion -> its value.
QUALITY_SCALES: dict[str, dict[str, float]] = {
    "relevance": {"relevant": 1.0, "moderately relevant": 0.5, "not relevant": 0.0},
    "conciseness": {"concise": 1.0, "not concise": 0.0},
    "repetition_avoidance": {"not repetitive": 1.0, "somewhat repetitive": 0.5, "repetitive": 0.0},
    "factuality": {"not hallucinating": 1.0, "hallucinating": 0.0},
    "politeness": {"polite": 1.0, "not polite": 0.0},
}


def turn_quality(values: dict[str, float]) -> float:
    """r_i * c_i * ra_i * f_i * p_i for one clarifying turn (values already mapped through QUALITY_SCALES)."""
    out = 1.0
    for name in QUALITY_SCALES:
        out *= values[name]
    return out


def sdrs(ars: list[float], quality: list[float] | None, correct: bool, max_turns_reached: bool = False,
         alpha: float = 0.5) -> dict[str, float | None]:
    """Strategic Dialogue Response Score (§2.3) of one conversation with N assistant turns.

    A = mean of the N turn scores ars_i; R = mean of r*c*ra*f*p over the N-1 non-final turns (the final turn
    is the prediction and is not rated). SDRS = 0 for a wrong final intent or when the turn limit ran out
    without a prediction; A for a single-turn conversation; alpha*A + (1-alpha)*R otherwise.
    Returns {"A", "R", "SDRS"}; R is None for a single turn, SDRS None when an input it needs is missing.
    """
    n = len(ars)
    if n == 0:
        raise ValueError("a conversation has at least one assistant turn")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    a = None if any(x is None for x in ars) else sum(ars) / n
    r = None
    if n > 1 and quality is not None:
        if len(quality) != n - 1:
            raise ValueError(f"R averages the {n - 1} non-final turns; got {len(quality)} quality values")
        r = None if any(q is None for q in quality) else sum(quality) / (n - 1)
    if max_turns_reached or not correct:
        score = 0.0
    elif n == 1:
        score = a
    else:
        score = None if a is None or r is None else alpha * a + (1 - alpha) * r
    return {"A": a, "R": r, "SDRS": score}
