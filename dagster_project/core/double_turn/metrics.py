"""Double-turn preference metrics: answer normalisation, exact match, answer-set F1, decision baselines."""

from __future__ import annotations

import re
import string
from collections.abc import Sequence

import numpy as np
from scipy.optimize import linear_sum_assignment

_ARTICLES = re.compile(r"\b(a|an|the)\b")


_PUNCT = set(string.punctuation)


def normalize_answer(text: str | None) -> str:
    """SQuAD-style normalisation: lower case, drop punctuation and articles, collapse whitespace."""
    text = "".join(ch for ch in (text or "").lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str | None, aliases: Sequence[str]) -> bool:
    """True when the normalised prediction equals any normalised alias (empty strings never match)."""
    pred = normalize_answer(prediction)
    return bool(pred) and any(pred == normalize_answer(a) for a in aliases)


def answer_set_f1(predictions: Sequence[str | None], gold: Sequence[Sequence[str]],
                  owners: Sequence[int] | None = None) -> dict[str, float]:
    """Precision, recall and F1 of a predicted answer set R against the gold set {y_1..y_k} (one alias list each).

    Without ``owners`` (a system that answers directly): R is a set, so predictions equal after
    normalisation count once; each prediction may be credited to at most one gold interpretation and
    vice versa (maximum bipartite matching); P = matched / |R|, R = matched / k.
    With ``owners`` (a system that asked a clarifying question): prediction j was made for user
    ``owners[j]`` and counts only when it is correct for that user's own answer (the paper's stricter
    rule); P = correct predictions / |R|, R = users served / k. ``None`` (an abstained user, a failed
    reply) is a wrong prediction.
    """
    if not gold:
        raise ValueError("the gold answer set is empty")
    k = len(gold)
    if owners is not None:
        if len(owners) != len(predictions):
            raise ValueError("owners and predictions differ in length")
        correct = [o for p, o in zip(predictions, owners) if p is not None and exact_match(p, gold[o])]
        n_pred, n_correct, served = len(predictions), len(correct), len(set(correct))
    else:
        distinct: list[str | None] = []
        seen: set[str] = set()
        for p in predictions:
            key = normalize_answer(p) if p is not None else None
            if key is None or not key:
                distinct.append(None)
            elif key not in seen:
                seen.add(key)
                distinct.append(p)
        n_pred = len(distinct)
        match = np.array([[p is not None and exact_match(p, g) for g in gold] for p in distinct], dtype=float)
        if match.size:
            rows, cols = linear_sum_assignment(match, maximize=True)
            n_correct = served = int(match[rows, cols].sum())
        else:
            n_correct = served = 0
    precision = n_correct / n_pred if n_pred else 0.0
    recall = served / k
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def direct_answer_accuracy(answered_directly: Sequence[bool], should_answer: Sequence[bool]) -> float:
    """Share of queries where the answer-or-clarify decision was right (Table 4 "DA Acc").

    A direct answer is right when the query is unambiguous and the greedy direct answer is correct
    (``should_answer``); asking is right otherwise.
    """
    if len(answered_directly) != len(should_answer) or not should_answer:
        raise ValueError("two non-empty sequences of equal length are needed")
    return float(np.mean([a == s for a, s in zip(answered_directly, should_answer)]))


def random_decision_baseline(f1_direct: Sequence[float], f1_clarify: Sequence[float],
                             should_answer: Sequence[bool], da_rate: float, repeats: int,
                             seed: int = 0) -> dict[str, float]:
    """The random clarify-or-answer baseline at a fixed DA%: answer round(da_rate * n) random queries
    directly (scoring them with ``f1_direct``), ask on the rest (``f1_clarify``); mean F1 and DA accuracy
    over ``repeats`` seeded draws, and each query's F1 averaged over the draws (``per_query_f1``)."""
    n = len(should_answer)
    if not (len(f1_direct) == len(f1_clarify) == n) or n == 0:
        raise ValueError("f1_direct, f1_clarify and should_answer must be non-empty and of equal length")
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    m = round(da_rate * n)
    rng = np.random.default_rng(seed)
    fd, fc, sa = np.asarray(f1_direct, float), np.asarray(f1_clarify, float), np.asarray(should_answer, bool)
    per_query, accs = np.zeros(n), []
    for _ in range(repeats):
        direct = np.zeros(n, dtype=bool)
        direct[rng.choice(n, size=m, replace=False)] = True
        per_query += np.where(direct, fd, fc)
        accs.append(float((direct == sa).mean()))
    per_query /= repeats
    return {"f1": float(per_query.mean()), "da_accuracy": float(np.mean(accs)), "da_rate": m / n,
            "repeats": repeats, "per_query_f1": per_query.tolist()}


def paired_bootstrap_p(a: Sequence[float], b: Sequence[float], samples: int, seed: int = 0,
                       chunk: int = 1000) -> float:
    """Two-sided p-value of mean(a) != mean(b) over the same queries (paired bootstrap, Koehn 2004): resample
    queries with replacement ``samples`` times; p = 2 x the share of resamples whose mean difference falls on
    the other side of zero (at most 1). Identical scores give 1."""
    d = np.asarray(a, float) - np.asarray(b, float)
    if len(d) == 0 or len(a) != len(b):
        raise ValueError("two non-empty score lists of equal length are needed")
    if samples < 1:
        raise ValueError("samples must be >= 1")
    if not d.any():
        return 1.0
    rng = np.random.default_rng(seed)
    below = above = 0
    for start in range(0, samples, chunk):
        means = d[rng.integers(0, len(d), size=(min(chunk, samples - start), len(d)))].mean(axis=1)
        below += int((means <= 0).sum())
        above += int((means >= 0).sum())
    return min(1.0, 2 * min(below, above) / samples)
