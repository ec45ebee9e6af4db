"""Metric primitives every paper uses: agreement, significance, decision F1, token F1, BERTScore, win rates."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import numpy as np
from scipy import stats
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS
from sklearn.metrics import cohen_kappa_score, f1_score


def cohen_kappa(labels_a: list[str], labels_b: list[str]) -> dict[str, float]:
    """Cohen's kappa and observed agreement P_o between two annotators."""
    if len(labels_a) != len(labels_b) or not labels_a:
        raise ValueError("two non-empty label lists of equal length are needed")
    po = sum(a == b for a, b in zip(labels_a, labels_b)) / len(labels_a)
    return {"kappa": float(cohen_kappa_score(labels_a, labels_b)), "observed_agreement": po, "n": len(labels_a)}


def accuracy_ci(correct: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a proportion (sound at small n, unlike the normal approximation); NaN when n = 0."""
    if n == 0:
        return float("nan"), float("nan")
    ci = stats.binomtest(int(correct), int(n)).proportion_ci(confidence_level=level, method="wilson")
    return float(ci.low), float(ci.high)


def paired_difference_ci(a_only: int, b_only: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """CI of the difference of two paired proportions (accuracy a - accuracy b) by Agresti & Min's adjusted
    Wald interval (0.5 added to each cell of the 2x2 table), which keeps its coverage at small n; NaN at n = 0."""
    if n == 0:
        return float("nan"), float("nan")
    m = n + 2
    p_a, p_b = (a_only + 0.5) / m, (b_only + 0.5) / m
    diff = p_a - p_b
    se = np.sqrt(max(p_a + p_b - diff ** 2, 0.0) / m)
    z = float(stats.norm.ppf(0.5 + level / 2))
    return float(max(-1.0, diff - z * se)), float(min(1.0, diff + z * se))


def paired_significance(correct_a: Sequence[int], correct_b: Sequence[int], ttest_min_n: int = 30,
                        level: float = 0.95) -> dict[str, float | int | str]:
    """Paired tests on per-turn correctness (1/0) of two methods on the same turns.

    p_ttest: paired t-test (scipy.stats.ttest_rel), as in the paper's Table 5; 1.0 when every difference
    is zero, NaN where it is undefined (fewer than two pairs, or every difference the same non-zero value).
    p_mcnemar: exact McNemar test (two-sided binomial test on the discordant pairs). `test` / `p` name the
    one to use: the t-test where it is defined and n >= ttest_min_n, else the exact test. diff_ci_*: a
    `level` CI of mean_diff (accuracy a - accuracy b), see paired_difference_ci.
    """
    a, b = np.asarray(correct_a, dtype=float), np.asarray(correct_b, dtype=float)
    if a.shape != b.shape:
        raise ValueError("paired samples must have the same length")
    d = a - b
    n = len(d)
    a_only, b_only = int(((a == 1) & (b == 0)).sum()), int(((a == 0) & (b == 1)).sum())
    if not d.any():
        t, p_t = 0.0, 1.0
    elif n < 2 or d.std(ddof=1) == 0:
        t, p_t = float("nan"), float("nan")
    else:
        res = stats.ttest_rel(a, b)
        t, p_t = float(res.statistic), float(res.pvalue)
    p_m = float(stats.binomtest(min(a_only, b_only), a_only + b_only, 0.5).pvalue) if a_only + b_only else 1.0
    use_t = n >= ttest_min_n and not np.isnan(p_t)
    low, high = paired_difference_ci(a_only, b_only, n, level)
    return {"n": n, "mean_diff": float(d.mean()) if n else 0.0, "t": t, "p_ttest": p_t,
            "a_only": a_only, "b_only": b_only, "p_mcnemar": p_m, "test": "ttest" if use_t else "mcnemar_exact",
            "p": p_t if use_t else p_m, "diff_ci_low": low, "diff_ci_high": high}


def decision_macro_f1(reference: Sequence[str], predicted: Sequence[str]) -> float:
    """Macro-F1 of ask/answer (ClariLM); an invalid reply is a miss for its reference class."""
    if not reference:
        return float("nan")
    return float(f1_score(list(reference), list(predicted), labels=["clarify", "answer"], average="macro",
                          zero_division=0))


def content_tokens(text: str | None) -> list[str]:
    """Lower-cased alphanumeric tokens without English stopwords (scikit-learn's list)."""
    return [t for t in re.findall(r"[a-z0-9]+", (text or "").lower()) if t not in ENGLISH_STOP_WORDS]


def token_f1(candidate: str | None, reference: str | None) -> float:
    """Bag-of-tokens F1 with stopwords removed (SQuAD convention: 1.0 if both are empty, 0.0 if one is)."""
    c, r = content_tokens(candidate), content_tokens(reference)
    if not c or not r:
        return float(not c and not r)
    common = sum((Counter(c) & Counter(r)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(c), common / len(r)
    return 2 * precision * recall / (precision + recall)


def bertscore_f1(candidates: Sequence[str], references: Sequence[str], model_path: str, num_layers: int = 6,
                 batch_size: int = 64, score_fn=None) -> list[float]:
    """BERTScore-F1 per pair with a local encoder folder (no hub); ``score_fn`` defaults to bert_score.score."""
    if len(candidates) != len(references):
        raise ValueError("candidates and references must pair up")
    if not candidates:
        return []
    if score_fn is None:
        from bert_score import score as score_fn
    _, _, f1 = score_fn(list(candidates), list(references), model_type=str(model_path), num_layers=num_layers,
                        lang="en", batch_size=batch_size, verbose=False)
    return [float(x) for x in f1]


def win_tie_lose(outcomes: Sequence[str]) -> dict[str, float | int]:
    """Shares of win / tie / lose among outcomes (each 'win' | 'tie' | 'lose')."""
    n = len(outcomes)
    counts = Counter(outcomes)
    bad = set(counts) - {"win", "tie", "lose"}
    if bad:
        raise ValueError(f"unknown outcomes {sorted(bad)}")
    return {"n": n, **{k: (counts[k] / n if n else float("nan")) for k in ("win", "tie", "lose")}}
