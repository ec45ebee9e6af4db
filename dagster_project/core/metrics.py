"""Metric definitions from the papers, on plain tables (ClarifyMT-Bench §3.2 / §5 first)."""

from __future__ import annotations

import re
import string
from collections.abc import Sequence

import numpy as np
import polars as pl
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import cohen_kappa_score

BREAKDOWNS: dict[str, list[str]] = {
    "overall": [],
    "by_turn": ["turn"],
    "by_persona": ["persona"],
    "by_subtype": ["subtype"],
    "by_subtype_turn": ["subtype", "turn"],
}


def clarification_metrics(pred: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Accuracy and error shares per group; the four shares of each row sum to 1.

    accuracy = predicted action == reference; under_clarification = answered where the reference is
    clarify; over_clarification = asked where the reference is answer; invalid = no protocol prefix
    (counted wrong, as in the paper). All four are shares of the group's evaluated turns.
    """
    ref, act = pl.col("reference_action"), pl.col("action")
    aggs = [
        pl.len().alias("n"),
        (act == ref).mean().alias("accuracy"),
        ((act == "answer") & (ref == "clarify")).mean().alias("under_clarification"),
        ((act == "clarify") & (ref == "answer")).mean().alias("over_clarification"),
        (act == "invalid").mean().alias("invalid"),
    ]
    if not keys:
        return pred.select(aggs)
    return pred.group_by(keys).agg(aggs).sort(keys)


def metric_tables(pred: pl.DataFrame) -> pl.DataFrame:
    """All breakdowns, per subject x method, as one long table (a `breakdown` column names each)."""
    frames = []
    for name, keys in BREAKDOWNS.items():
        t = clarification_metrics(pred, ["subject", "method", *keys])
        frames.append(t.with_columns(pl.lit(name).alias("breakdown")))
    out = pl.concat(frames, how="diagonal_relaxed")
    cols = ["breakdown", "subject", "method", "persona", "subtype", "turn",
            "n", "accuracy", "under_clarification", "over_clarification", "invalid"]
    for c, t in (("persona", pl.Utf8), ("subtype", pl.Utf8), ("turn", pl.Int64)):
        if c not in out.columns:
            out = out.with_columns(pl.lit(None, t).alias(c))
    return out.select(cols)


def cohen_kappa(labels_a: list[str], labels_b: list[str]) -> dict[str, float]:
    """Cohen's kappa and observed agreement P_o between two annotators."""
    if len(labels_a) != len(labels_b) or not labels_a:
        raise ValueError("two non-empty label lists of equal length are needed")
    po = sum(a == b for a, b in zip(labels_a, labels_b)) / len(labels_a)
    return {"kappa": float(cohen_kappa_score(labels_a, labels_b)), "observed_agreement": po, "n": len(labels_a)}


# --------------------------------------------------------------------------- intent classification with clarification
# (seed: "Scaling Intent Understanding", §2.3 and Appendices D/E)

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


# --------------------------------------------------------------------------- double-turn preferences (answer sets)

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


def ranking_metrics(qrels: dict[str, dict[str, int]], rankings: dict[str, Sequence[str]],
                    ks: Sequence[int] = (1, 3, 5)) -> pl.DataFrame:
    """Per-query MRR, P@k and nDCG@k of ranked doc lists, computed by trec_eval (pytrec_eval).

    qrels: query -> {doc: relevance grade} (relevant: grade >= 1); rankings: query -> doc ids best first
    (may be empty: scores 0, as ``trec_eval -c`` counts missing queries). Every query of qrels gets a row;
    queries only in rankings are ignored. The order of each list is what counts: trec_eval sees score
    1/rank, so raw scores and their ties play no part. nDCG uses linear gains (trec_eval ndcg_cut).
    Columns: query_id, mrr, p_at_<k>, ndcg_at_<k>.
    """
    import pytrec_eval

    cols = ["mrr", *[f"p_at_{k}" for k in ks], *[f"ndcg_at_{k}" for k in ks]]
    names = ["recip_rank", *[f"P_{k}" for k in ks], *[f"ndcg_cut_{k}" for k in ks]]
    schema = {"query_id": pl.Utf8, **{c: pl.Float64 for c in cols}}
    run = {q: {d: 1.0 / r for r, d in enumerate(dict.fromkeys(rankings.get(q, [])), start=1)} for q in qrels}
    run = {q: docs for q, docs in run.items() if docs}
    judged = {q: {d: int(g) for d, g in docs.items()} for q, docs in qrels.items()}
    scores = pytrec_eval.RelevanceEvaluator(judged, set(names)).evaluate(run) if run else {}
    return pl.DataFrame({"query_id": list(qrels),
                         **{c: [float(scores.get(q, {}).get(n, 0.0)) for q in qrels] for c, n in zip(cols, names)}},
                        schema=schema)


# --------------------------------------------------------------------------- ClarifyMT-Bench method comparison
# (§5 Tables 3-6, Figure 3; ClariLM token-F1 / BERTScore / win-tie-lose)

import re  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Sequence  # noqa: E402

import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS  # noqa: E402
from sklearn.metrics import f1_score  # noqa: E402

EVALUATION_BREAKDOWNS: dict[str, list[str]] = {**BREAKDOWNS, "by_persona_turn": ["persona", "turn"]}
PERSONA_COLUMNS = ("precise", "partial_vague", "off_focus", "contradictory", "factually_wrong", "refusal")


def evaluation_tables(pred: pl.DataFrame) -> pl.DataFrame:
    """metric_tables per dataset x subject x method, plus persona x turn (Table 5 is its turn-2 slice)."""
    if "dataset" not in pred.columns:
        pred = pred.with_columns(dataset=pl.lit("clarifymt"))
    frames = []
    for name, keys in EVALUATION_BREAKDOWNS.items():
        t = clarification_metrics(pred, ["dataset", "subject", "method", *keys])
        frames.append(t.with_columns(pl.lit(name).alias("breakdown")))
    out = pl.concat(frames, how="diagonal_relaxed")
    for c, t in (("persona", pl.Utf8), ("subtype", pl.Utf8), ("turn", pl.Int64)):
        if c not in out.columns:
            out = out.with_columns(pl.lit(None, t).alias(c))
    return out.select("breakdown", "dataset", "subject", "method", "persona", "subtype", "turn",
                      "n", "accuracy", "under_clarification", "over_clarification", "invalid")


def persona_spread(accuracies: Sequence[float]) -> tuple[float, float]:
    """(Avg., Std.) over persona accuracies as in Tables 3/6: unweighted mean, population std (ddof=0)."""
    if not accuracies:
        return float("nan"), float("nan")
    a = np.asarray(accuracies, dtype=float)
    return float(a.mean()), float(a.std(ddof=0))


def paired_significance(correct_a: Sequence[int], correct_b: Sequence[int]) -> dict[str, float | int]:
    """Paired tests on per-turn correctness (1/0) of two methods on the same turns.

    p_ttest: paired t-test (scipy.stats.ttest_rel), as in the paper's Table 5; 1.0 when every difference
    is zero, 0.0 when every difference is the same non-zero value. p_mcnemar: exact McNemar test
    (two-sided binomial test on the discordant pairs), the textbook test for paired binary outcomes.
    """
    a, b = np.asarray(correct_a, dtype=float), np.asarray(correct_b, dtype=float)
    if a.shape != b.shape:
        raise ValueError("paired samples must have the same length")
    d = a - b
    n = len(d)
    a_only, b_only = int(((a == 1) & (b == 0)).sum()), int(((a == 0) & (b == 1)).sum())
    if n < 2 or not d.any():
        t, p_t = 0.0, 1.0
    elif d.std(ddof=1) == 0:
        t, p_t = float("inf") * np.sign(d.mean()), 0.0
    else:
        res = stats.ttest_rel(a, b)
        t, p_t = float(res.statistic), float(res.pvalue)
    p_m = float(stats.binomtest(min(a_only, b_only), a_only + b_only, 0.5).pvalue) if a_only + b_only else 1.0
    return {"n": n, "mean_diff": float(d.mean()) if n else 0.0, "t": t, "p_ttest": p_t,
            "a_only": a_only, "b_only": b_only, "p_mcnemar": p_m}


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


def _scope_summary(frame: pl.DataFrame) -> pl.DataFrame:
    keys = ["dataset", "subject", "method"]
    base = clarification_metrics(frame, keys).join(
        frame.group_by(keys).agg(pl.col("llm_calls").mean().alias("calls_per_turn")), on=keys, how="left")
    f1 = [{"dataset": d, "subject": s, "method": m,
           "macro_f1": decision_macro_f1(g["reference_action"].to_list(), g["action"].to_list())}
          for (d, s, m), g in frame.group_by(keys)]
    base = base.join(pl.DataFrame(f1, schema={**{k: pl.Utf8 for k in keys}, "macro_f1": pl.Float64}),
                     on=keys, how="left")
    by_p = clarification_metrics(frame.filter(pl.col("persona").is_in(PERSONA_COLUMNS)), [*keys, "persona"])
    rows = []
    for (d, s, m), g in by_p.group_by(keys):
        accs = dict(zip(g["persona"], g["accuracy"]))
        avg, std = persona_spread([accs[p] for p in PERSONA_COLUMNS if p in accs])
        rows.append({"dataset": d, "subject": s, "method": m, **{p: accs.get(p) for p in PERSONA_COLUMNS},
                     "persona_avg": avg, "persona_std": std})
    wide = pl.DataFrame(rows, schema={**{k: pl.Utf8 for k in keys}, **{p: pl.Float64 for p in PERSONA_COLUMNS},
                                      "persona_avg": pl.Float64, "persona_std": pl.Float64})
    return base.join(wide, on=keys, how="left")


def _significance(frame: pl.DataFrame, agent: str, alpha: float) -> pl.DataFrame:
    keys = ["dataset", "subject"]
    scored = frame.with_columns(correct=(pl.col("action") == pl.col("reference_action")).cast(pl.Int64))
    rows = []
    for (d, s), g in scored.group_by(keys):
        ref = g.filter(pl.col("method") == agent).select("dialogue_id", "turn", "persona", agent_ok="correct")
        if ref.is_empty():
            continue
        better_than: dict[str, list[str]] = {}
        for m in sorted(set(g["method"]) - {agent}):
            pair = ref.join(g.filter(pl.col("method") == m).select("dialogue_id", "turn", "correct"),
                            on=["dialogue_id", "turn"], how="inner")
            test = paired_significance(pair["agent_ok"].to_list(), pair["correct"].to_list())
            personas = []
            for p in PERSONA_COLUMNS:
                pp = pair.filter(pl.col("persona") == p)
                tp = paired_significance(pp["agent_ok"].to_list(), pp["correct"].to_list())
                if tp["mean_diff"] > 0 and tp["p_ttest"] < alpha:
                    personas.append(p)
            better_than[m] = personas
            rows.append({"dataset": d, "subject": s, "method": m, "reference_method": agent, "n_paired": test["n"],
                         "p_ttest": test["p_ttest"], "p_mcnemar": test["p_mcnemar"],
                         "agent_better_personas": personas})
        everywhere = [p for p in PERSONA_COLUMNS if better_than and all(p in v for v in better_than.values())]
        rows.append({"dataset": d, "subject": s, "method": agent, "reference_method": None, "n_paired": None,
                     "p_ttest": None, "p_mcnemar": None, "agent_better_personas": everywhere})
    return pl.DataFrame(rows, schema={"dataset": pl.Utf8, "subject": pl.Utf8, "method": pl.Utf8,
                                      "reference_method": pl.Utf8, "n_paired": pl.Int64, "p_ttest": pl.Float64,
                                      "p_mcnemar": pl.Float64, "agent_better_personas": pl.List(pl.Utf8)})


def method_comparison(pred: pl.DataFrame, agent: str = "clarify_agent", comparison_turn: int = 2,
                      alpha: float = 0.05, quality: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per dataset x subject x method x scope (turn <comparison_turn> as in Table 5, and all turns).

    Accuracy overall and per persona (P, PV, OF, CT, FA, RF), the personas' Avg. and Std. (Table 6),
    under-/over-clarification, invalid share, ask/answer macro-F1, LLM calls per turn, and paired tests of
    ``agent`` against each other method on the same turns (p_ttest, p_mcnemar). ``agent_better_personas``
    lists the personas where the agent is significantly better (p_ttest < alpha) than that method; on the
    agent's own row, the personas where it beats every other method. ``quality`` (per dataset x subject x
    method: judge / token-F1 / BERTScore / win rates) is joined on when given.
    """
    if "dataset" not in pred.columns:
        pred = pred.with_columns(dataset=pl.lit("clarifymt"))
    if "llm_calls" not in pred.columns:
        pred = pred.with_columns(llm_calls=pl.lit(None, pl.Int64))
    frames = []
    for scope, frame in ((f"turn_{comparison_turn}", pred.filter(pl.col("turn") == comparison_turn)),
                         ("all_turns", pred)):
        if frame.is_empty():
            continue
        summary = _scope_summary(frame).join(_significance(frame, agent, alpha),
                                             on=["dataset", "subject", "method"], how="left")
        frames.append(summary.with_columns(scope=pl.lit(scope)))
    keys = ["dataset", "subject", "method"]
    if not frames:
        return pl.DataFrame()
    out = pl.concat(frames, how="diagonal_relaxed")
    if quality is not None and not quality.is_empty():
        out = out.join(quality, on=keys, how="left")
    first = ["dataset", "subject", "method", "scope", "n", "accuracy", *PERSONA_COLUMNS, "persona_avg",
             "persona_std", "under_clarification", "over_clarification", "invalid", "macro_f1", "calls_per_turn"]
    return out.select(*first, *[c for c in out.columns if c not in first]).sort("dataset", "subject", "scope",
                                                                                "method")
