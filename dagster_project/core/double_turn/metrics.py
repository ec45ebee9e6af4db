"""Double-turn preference metrics: answer normalisation, exact match, answer-set F1, decision baselines.

The scores of Tables 1 and 4 follow the paper's released metric code (github.com/mikejqzhang/clarifying_questions,
src/metrics.py and src/utils.py): ``paper_*`` functions. ``normalize_answer`` / ``exact_match`` keep word
boundaries and aliases for building and labelling training data.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence

import numpy as np

_ARTICLES = re.compile(r"\b(a|an|the)\b")


_PUNCT = set(string.punctuation)


def normalize_answer(text: str | None) -> str:
    """SQuAD-style normalisation that keeps word boundaries: lower case, drop punctuation and articles, collapse
    whitespace. For matching words (leaks, merging readings, de-duplicating answers); scores use paper_normalize."""
    text = "".join(ch for ch in (text or "").lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str | None, aliases: Sequence[str]) -> bool:
    """True when the normalised prediction equals any normalised alias (empty strings never match); alias-aware
    labels of the training data, not the paper's evaluation (paper_em)."""
    pred = normalize_answer(prediction)
    return bool(pred) and any(pred == normalize_answer(a) for a in aliases)


def paper_normalize(text: str | None) -> str | None:
    """The double-turn paper's answer normalisation (src/utils.py ``normalize``): lower case, drop punctuation,
    replace articles by spaces, then remove ALL whitespace ("Jay Z" == "Jay-Z"). None stays None."""
    if text is None:
        return None
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return "".join(_ARTICLES.sub(" ", text).split())


def paper_em(predictions: str | Sequence[str | None] | None, gold: str | Sequence[str | None] | None) -> bool:
    """The paper's ``em``: some non-empty prediction string and some non-empty gold string normalise equal (an
    answer that is only an article normalises to "" and matches a gold that does too)."""
    if predictions is None or gold is None:
        return False
    preds = [predictions] if isinstance(predictions, str) else predictions
    golds = [gold] if isinstance(gold, str) else gold
    return bool({paper_normalize(p) for p in preds if p} & {paper_normalize(g) for g in golds if g})


def paper_top_k(samples: Sequence[str | None], k: int) -> list[str]:
    """Direct-Ans (sampled) as the paper builds it: the k most frequent paper-normalised samples (ties: first
    seen first), as normalised strings; an unusable sample (None) counts as the empty answer."""
    counts: dict[str, int] = {}
    for s in samples:
        key = paper_normalize(s or "") or ""
        counts[key] = counts.get(key, 0) + 1
    return sorted(counts, key=lambda key: -counts[key])[:k]  # sorted is stable: first seen first among ties


def paper_answer_set_f1(predictions: Sequence[str | None], gold: Sequence[str]) -> dict[str, float]:
    """Answer-set F1 of a direct answer set as the paper scores it (``precision_recall``): the gold set is the
    set of raw gold strings, no aliases; m = distinct normalised predictions found among the normalised gold;
    P = m / len(predictions), R = m / |set(gold)|. None (an unusable reply) is a prediction that never matches."""
    if not gold:
        raise ValueError("the gold answer set is empty")
    if not predictions:
        raise ValueError("the prediction list is empty")
    gold_keys = {paper_normalize(g) for g in gold}
    m = len({paper_normalize(p) for p in predictions if p is not None} & gold_keys)
    precision, recall = m / len(predictions), m / len(set(gold))
    f1 = 2 * precision * recall / (precision + recall) if precision and recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def paper_leak(gold: str, reply: str | None, clarifying_question: str | None) -> bool:
    """The paper's leak: the normalised gold answer is a substring of both the normalised user reply and the
    normalised clarifying question (``eval_clarify``); an answer that is only in the reply is no leak."""
    key = paper_normalize(gold) or ""
    return key in (paper_normalize(reply) or "") and key in (paper_normalize(clarifying_question) or "")


def paper_user_correct(prediction: str | None, gold: str, reply: str | None,
                       clarifying_question: str | None) -> bool:
    """One simulated user after a clarifying question, as ``eval_clarify`` counts it: the final answer matches the
    user's gold string, the user replied (non-empty), and the gold was not leaked (paper_leak)."""
    return paper_em(prediction, gold) and bool(reply) and not paper_leak(gold, reply, clarifying_question)


def paper_clarify_f1(correct: Sequence[bool]) -> dict[str, float]:
    """The paper's clarify-mode "f1": users served correctly / users (one prediction per user, so precision,
    recall and F1 are all this share)."""
    if not correct:
        raise ValueError("a clarify turn needs at least one user")
    share = sum(correct) / len(correct)
    return {"precision": share, "recall": share, "f1": share}


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
