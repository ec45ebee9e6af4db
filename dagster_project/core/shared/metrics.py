"""Metric primitives every paper uses: agreement, significance, decision F1, token F1, BERTScore, win rates."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

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


def wilson_interval(p: float, n: float, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a proportion p observed on n (possibly fractional, effective) units."""
    if n <= 0 or np.isnan(p):
        return float("nan"), float("nan")
    z = float(stats.norm.ppf(0.5 + level / 2))
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * np.sqrt(max(p * (1 - p) / n + z * z / (4 * n * n), 0.0))
    return float(max(0.0, centre - half)), float(min(1.0, centre + half))


def _cluster_sums(values: np.ndarray, weights: np.ndarray, clusters: Sequence[object]) -> tuple[np.ndarray, np.ndarray]:
    """Per-cluster sums of weight * value and of weight, clusters in first-seen order."""
    index: dict[object, int] = {}
    ids = np.array([index.setdefault(c, len(index)) for c in clusters], dtype=int)
    return (np.bincount(ids, weights=weights * values, minlength=len(index)),
            np.bincount(ids, weights=weights, minlength=len(index)))


def clustered_accuracy(correct: Sequence[float], weights: Sequence[float], clusters: Sequence[object],
                       level: float = 0.95) -> dict[str, float | int]:
    """Weighted accuracy with a 95% CI that treats the turns of one cluster (a query) as dependent.

    accuracy = sum(w * correct) / sum(w). The CI is Wilson's on the effective sample size n_eff = p(1-p) / v,
    where v is the cluster-robust (sandwich) variance of the ratio estimator, i.e. the weighted turn count
    divided by the design effect (Kish); n_eff is kept between the number of clusters and the weighted turn
    count, and is the number of clusters where p is 0 or 1 (no variance to estimate). With one turn per cluster
    and unit weights it is exactly the Wilson interval on n.
    """
    y, w = np.asarray(correct, dtype=float), np.asarray(weights, dtype=float)
    if len(y) == 0 or w.sum() <= 0:
        return {"accuracy": float("nan"), "n_eff": 0.0, "n_clusters": 0, "ci_low": float("nan"),
                "ci_high": float("nan")}
    s, wc = _cluster_sums(y, w, clusters)
    total, g = float(wc.sum()), len(wc)
    p = float(s.sum() / total)
    var = float(((s - p * wc) ** 2).sum() / total ** 2)
    n_eff = float(g) if var <= 0 or p in (0.0, 1.0) else float(np.clip(p * (1 - p) / var, g, total))
    low, high = wilson_interval(p, n_eff, level)
    return {"accuracy": p, "n_eff": n_eff, "n_clusters": g, "ci_low": low, "ci_high": high}


PERMUTATION_BATCH = 1000


def sign_flip_pvalue(d: np.ndarray, n_resamples: int = 9999, seed: int = 0,
                     batch: int = PERMUTATION_BATCH) -> float:
    """Two-sided sign-flip permutation test of sum(d): the p-value of scipy's permutation_test (one sample,
    permutation_type "samples", rng default_rng(seed)), exact while 2^G <= n_resamples.

    Past that the flips are sampled with scipy's own draws, but without its generic machinery (0.55 s per test at
    G = 1,004 clusters, ~40 s of a paper-scale run): scipy shuffles each cluster's pair (d, -d) with one 32-bit
    draw whose low bit 0 swaps the pair, so the same draws come from Generator.integers; batches of `batch`
    resamples keep memory bounded. tests/core/test_eval_clustered.py compares both on the same seeds.
    """
    g = len(d)
    if 2 ** g <= n_resamples:  # every sign pattern, enumerated by scipy
        res = stats.permutation_test((d,), lambda x, axis=-1: np.sum(x, axis=axis), permutation_type="samples",
                                     vectorized=True, n_resamples=n_resamples, rng=np.random.default_rng(seed))
        return float(min(1.0, res.pvalue))
    rng = np.random.default_rng(seed)
    observed = float(d.sum())
    gamma = abs(np.finfo(float).eps * 100 * observed)  # scipy's tolerance for ties
    at_most = at_least = 0
    for start in range(0, n_resamples, batch):
        m = min(batch, n_resamples - start)
        flipped = (rng.integers(0, 2 ** 32, size=(m, g), dtype=np.uint32) & 1) == 0
        null = np.where(flipped, -d, d).sum(axis=-1)
        at_most += int(np.count_nonzero(null <= observed + gamma))
        at_least += int(np.count_nonzero(null >= observed - gamma))
    return float(min(1.0, 2 * min(at_most + 1, at_least + 1) / (n_resamples + 1)))


def clustered_paired_test(correct_a: Sequence[float], correct_b: Sequence[float], weights: Sequence[float],
                          clusters: Sequence[object], ttest_min_n: int = 30, level: float = 0.95,
                          n_resamples: int = 9999, seed: int = 0) -> dict[str, float | int | str]:
    """Paired comparison of two methods on the same turns, with the turns of one cluster (query) dependent.

    mean_diff = weighted accuracy a - weighted accuracy b. p_ttest: cluster-robust paired t-test (the per-cluster
    contrasts, CR1 sandwich variance, G - 1 degrees of freedom); with one turn per cluster and unit weights it is
    scipy's ttest_rel. p_sign_flip: sign-flip permutation test of the per-cluster contrasts (scipy
    permutation_test's p-value, see sign_flip_pvalue; exact while 2^G <= n_resamples; with one turn per cluster
    it is the exact McNemar/sign test). `test` / `p`: the t-test from ttest_min_n clusters where it is defined,
    else the sign-flip test.
    diff_ci_*: mean_diff -+ t(G-1) * robust SE (NaN below two clusters).
    """
    a, b, w = (np.asarray(x, dtype=float) for x in (correct_a, correct_b, weights))
    if not (a.shape == b.shape == w.shape):
        raise ValueError("paired samples and weights must have the same length")
    nan = float("nan")
    if len(a) == 0 or w.sum() <= 0:
        return {"n": 0, "n_clusters": 0, "mean_diff": 0.0, "t": nan, "p_ttest": nan, "p_sign_flip": nan,
                "test": "none", "p": nan, "diff_ci_low": nan, "diff_ci_high": nan}
    d, wc = _cluster_sums(a - b, w, clusters)
    g, total = len(d), float(wc.sum())
    diff = float(d.sum() / total)
    resid = d - diff * wc
    se = float(np.sqrt(g / (g - 1) * (resid ** 2).sum()) / total) if g > 1 else nan
    if not d.any():
        t, p_t = 0.0, 1.0
    elif g < 2 or se == 0:
        t, p_t = nan, nan
    else:
        t = diff / se
        p_t = float(2 * stats.t.sf(abs(t), g - 1))
    if d.any() and g >= 2:
        p_s = sign_flip_pvalue(d, n_resamples, seed)
    else:  # no difference, or one cluster (its two sign flips are equally extreme)
        p_s = 1.0
    q = float(stats.t.ppf(0.5 + level / 2, g - 1)) if g > 1 else nan
    low, high = (max(-1.0, diff - q * se), min(1.0, diff + q * se)) if g > 1 else (nan, nan)
    use_t = g >= ttest_min_n and not np.isnan(p_t)
    return {"n": len(a), "n_clusters": g, "mean_diff": diff, "t": t, "p_ttest": p_t, "p_sign_flip": p_s,
            "test": "cluster_ttest" if use_t else "sign_flip", "p": p_t if use_t else p_s,
            "diff_ci_low": float(low), "diff_ci_high": float(high)}


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error rate); NaN p-values stay NaN and are not counted."""
    p = np.asarray(p_values, dtype=float)
    out = np.full(len(p), np.nan)
    idx = np.flatnonzero(~np.isnan(p))
    m = len(idx)
    running = 0.0
    for rank, i in enumerate(idx[np.argsort(p[idx], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out.tolist()


def decision_macro_f1(reference: Sequence[str], predicted: Sequence[str],
                      weights: Sequence[float] | None = None) -> float:
    """Macro-F1 of ask/answer (ClariLM); an invalid reply is a miss for its reference class; `weights` per turn
    (e.g. a shared turn counted once)."""
    if not reference:
        return float("nan")
    return float(f1_score(list(reference), list(predicted), labels=["clarify", "answer"], average="macro",
                          zero_division=0, sample_weight=None if weights is None else list(weights)))


def clarify_f1(reference: Sequence[str], predicted: Sequence[str], weights: Sequence[float] | None = None) -> float:
    """F1 of the clarify class (ask = positive; an invalid reply is a miss): ClariLM's reported F1 (IN3: accuracy
    89.72 with F1 94.36 is only possible for the positive class, not for the macro average)."""
    if not reference:
        return float("nan")
    return float(f1_score(list(reference), list(predicted), labels=["clarify"], average=None, zero_division=0,
                          sample_weight=None if weights is None else list(weights))[0])


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


BERTSCORE_CHUNK = 1000  # pairs per bert_score call: it keeps every sentence's token embeddings until the call ends
# (+306 MB of peak RSS at 2,000 pairs, +642 MB at 8,000 on MiniLM), so one call over a paper-scale run's pairs was
# that run's memory peak; pairs are scored independently (idf off), so chunks give the same F1


def _bert_scorer(model_type: str, num_layers: int, batch_size: int) -> Callable[..., tuple[Any, Any, Any]]:
    """bert_score's BERTScorer loaded once for every chunk of one bertscore_f1 call (and freed after it)."""
    from bert_score import BERTScorer

    scorer = BERTScorer(model_type=model_type, num_layers=num_layers, lang="en")
    return lambda cands, refs, **_: scorer.score(cands, refs, batch_size=batch_size, verbose=False)


def bertscore_f1(candidates: Sequence[str], references: Sequence[str], model_path: str, num_layers: int = 6,
                 batch_size: int = 64, score_fn=None, chunk: int = BERTSCORE_CHUNK) -> list[float]:
    """BERTScore-F1 per pair, in input order, with a local encoder folder (no hub), `chunk` pairs per ``score_fn``
    call (default: bert_score's BERTScorer, loaded once for the whole call)."""
    if len(candidates) != len(references):
        raise ValueError("candidates and references must pair up")
    if not candidates:
        return []
    score_fn = score_fn or _bert_scorer(str(model_path), num_layers, batch_size)
    # bert_score encodes each distinct sentence of a call once: pairs sorted by reference (then candidate) keep a
    # reference shared by several methods' outputs in one chunk
    order = sorted(range(len(candidates)), key=lambda i: (references[i], candidates[i]))
    out = [0.0] * len(order)
    for start in range(0, len(order), chunk):
        part = order[start:start + chunk]
        _, _, f1 = score_fn([candidates[i] for i in part], [references[i] for i in part], model_type=str(model_path),
                            num_layers=num_layers, lang="en", batch_size=batch_size, verbose=False)
        for i, x in zip(part, f1, strict=True):
            out[i] = float(x)
    return out


def win_tie_lose(outcomes: Sequence[str]) -> dict[str, float | int]:
    """Shares of win / tie / lose among outcomes (each 'win' | 'tie' | 'lose')."""
    n = len(outcomes)
    counts = Counter(outcomes)
    bad = set(counts) - {"win", "tie", "lose"}
    if bad:
        raise ValueError(f"unknown outcomes {sorted(bad)}")
    return {"n": n, **{k: (counts[k] / n if n else float("nan")) for k in ("win", "tie", "lose")}}
