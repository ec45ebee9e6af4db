"""The papers' published numbers that a headline table shows beside ours, each with its source, and the verdict
in words of one trained-vs-base comparison. Pure data and arithmetic: no Dagster, no model."""

from __future__ import annotations

from typing import Any

DOUBLE_TURN_SOURCE = ("Zhang, Knox & Choi, 'Modeling Future Conversation Turns to Teach LLMs to Ask Clarifying "
                      "Questions', abstract (seeds/double-turn-preferences.md: +5% answer-set F1) and ARCHITECTURE "
                      "§7b (+3% clarify-or-answer accuracy, as the issue quotes the abstract)")
INTENTS_SOURCE = ("'Scaling Intent Understanding: Classification with Clarification using Lightweight LLMs', "
                  "seeds/intent-classification-with-clarification.md, Tables 2, 4 and 7")
CLARIMM_SOURCE = ("'Multi-Turn Multi-Modal Question Clarification for Enhanced Conversational Understanding', "
                  "seeds/clarimm-multimodal-multiturn.md, Table 3 (multi-turn) and Table 4 (single-turn), ClariMM "
                  "test split")

# Double-turn: the gain of DPO on double-turn labels over DPO on single-turn labels, in percentage points.
DOUBLE_TURN_GAINS = {"f1_total": 5.0, "da_accuracy": 3.0}  # answer-set F1 (total); clarify-or-answer accuracy

# Intents: Llama-3.1-8B base vs instruction-tuned (the deployed model) per dataset (Table 2), OOD (Table 7) and the
# SDRS of a model tuned on each top-percentile subset (Table 4, proprietary data).
INTENTS: list[dict[str, Any]] = [
    *({"table": "2", "dataset": d, "model": m, "ic_accuracy": acc, "sdrs": sdrs, "ars": ars, "source": INTENTS_SOURCE}
      for d, m, acc, sdrs, ars in [
          ("SNIPS", "Llama-3.1-8B (base)", 88.0, 0.51, 0.52),
          ("SNIPS", "Instruction-tuned Llama-3.1-8B", 97.6, 0.79, 0.8),
          ("ATIS", "Llama-3.1-8B (base)", 84.0, 0.72, 0.74),
          ("ATIS", "Instruction-tuned Llama-3.1-8B", 98.0, 0.90, 0.88),
          ("Proprietary", "Llama-3.1-8B (base)", 91.0, 0.81, 0.81),
          ("Proprietary", "Instruction-tuned Llama-3.1-8B", 99.1, 0.94, 0.86)]),
    *({"table": "4", "dataset": "Proprietary", "model": f"Instruction-tuned Llama-3.1-8B, top {p}%", "sdrs": s,
       "source": INTENTS_SOURCE} for p, s in [(100, 0.83), (90, 0.89), (85, 0.94), (80, 0.90), (75, 0.87), (65, 0.81)]),
    {"table": "7", "dataset": "Proprietary OOD (50)", "model": "Llama-3.1-8B (base)", "ood_accuracy": 55.0,
     "source": INTENTS_SOURCE},
    {"table": "7", "dataset": "Proprietary OOD (50)", "model": "Instruction-tuned Llama-3.1-8B", "ood_accuracy": 94.0,
     "source": INTENTS_SOURCE},
]

# ClariMM: (ranker, images used) -> MRR, P@1, P@3, P@5, nDCG@1, nDCG@3, nDCG@5 in %, multi-turn and single-turn.
_CLARIMM_COLUMNS = ("mrr", "p_at_1", "p_at_3", "p_at_5", "ndcg_at_1", "ndcg_at_3", "ndcg_at_5")
_CLARIMM = {
    "multi_turn": [("BM25", False, 50.74, 39.62, 36.16, 36.03, 25.80, 23.39, 24.56),
                   ("Bert", False, 56.36, 46.08, 41.50, 41.37, 35.70, 33.82, 34.01),
                   ("T5", False, 52.15, 41.30, 37.64, 38.63, 41.30, 38.82, 39.39),
                   ("Qwen-2", False, 46.48, 42.26, 39.72, 39.23, 40.08, 37.96, 36.88),
                   ("VisualBert", True, 56.50, 46.57, 46.24, 44.02, 35.33, 36.65, 36.28),
                   ("VLT5", True, 53.22, 42.34, 38.83, 39.43, 42.34, 39.90, 40.26),
                   ("Mario", True, 59.36, 48.10, 47.09, 45.48, 46.90, 45.77, 43.98)],
    "single_turn": [("BM25", False, 42.94, 32.07, 30.81, 30.37, 20.39, 20.15, 21.02),
                    ("Bert", False, 49.34, 39.22, 37.42, 36.27, 29.66, 29.42, 29.13),
                    ("T5", False, 41.37, 28.08, 28.97, 28.88, 28.08, 29.16, 31.92),
                    ("Qwen-2", False, 44.30, 40.56, 37.68, 35.97, 38.40, 35.94, 33.68),
                    ("VisualBert", True, 45.95, 37.75, 33.50, 32.55, 28.43, 25.83, 25.20),
                    ("VLT5", True, 43.18, 30.46, 28.92, 28.94, 30.46, 29.69, 30.42),
                    ("Mario", True, 53.24, 46.54, 43.48, 40.02, 41.85, 39.56, 38.68)],
}
CLARIMM: list[dict[str, Any]] = [
    {"input": inp, "ranker": r[0], "images": r[1], **dict(zip(_CLARIMM_COLUMNS, r[2:], strict=True)),
     "source": CLARIMM_SOURCE} for inp, rows in _CLARIMM.items() for r in rows]


def verdict(n: int, diff: float | None, p: float | None, alpha: float, min_n: int, what: str = "pairs") -> str:
    """improved / not improved / not significant, with n, from a paired difference (ours - reference) and its p."""
    if not n or diff is None:
        return f"not compared (no {what} scored by both)"
    if n < min_n:
        return f"not significant: too few {what} (n={n} < {min_n}) to tell"
    if p is not None and p < alpha:
        return f"improved (diff {diff:+.3f}, p={p:.3g}, n={n})" if diff > 0 else \
            f"not improved: significantly worse (diff {diff:+.3f}, p={p:.3g}, n={n})"
    if diff <= 0:
        return f"not improved (diff {diff:+.3f}, p={p:.3g}, n={n})" if p is not None else f"not improved (n={n})"
    return f"not significant (diff {diff:+.3f}, p={p:.3g}, n={n})" if p is not None else f"not significant (n={n})"
