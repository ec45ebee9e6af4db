"""Trained models in the evaluation group: each asked in the template it was trained on (TemplateMethod) and
compared with its reference subject (one method, the same held-out turns, paired tests, clarify-class F1)."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl
from sklearn.metrics import f1_score

from dagster_project.config import EvaluationConfig
from dagster_project.core.clarifymt.agent.method import DialogueTurn, Method, Prediction, decision_prediction
from dagster_project.core.clarifymt.agent.registry import build_method
from dagster_project.core.clarifymt.metrics import clarification_metrics, scored, weighted
from dagster_project.core.shared.dedup import Embed
from dagster_project.core.shared.metrics import clarify_f1, clustered_paired_test, decision_macro_f1
from dagster_project.core.training.template import TrainedTemplate, load_trained_template
from dagster_project.llm.chat import ChatRequest
from dagster_project.llm.task import Chat
from dagster_project.llm.trained import TrainedModelMissing, training_name

SIDE = ["n", "accuracy", "accuracy_ci_low", "accuracy_ci_high", "clarify_f1", "macro_f1", "protocol_compliance",
        "under_clarification", "over_clarification", "judge_score", "judge_n"]
SCHEMA = {"dataset": pl.Utf8, "subject": pl.Utf8, "reference": pl.Utf8, "method": pl.Utf8,
          **{c: pl.Int64 if c in ("n", "judge_n") else pl.Float64 for c in SIDE},
          **{f"ref_{c}": pl.Int64 if c in ("n", "judge_n") else pl.Float64 for c in SIDE},
          "majority_action": pl.Utf8, "majority_accuracy": pl.Float64,
          "n_paired": pl.Int64, "diff": pl.Float64, "diff_ci_low": pl.Float64, "diff_ci_high": pl.Float64,
          "test": pl.Utf8, "p_value": pl.Float64, "significant": pl.Boolean, "verdict": pl.Utf8}


class TemplateMethod:
    """A trained subject's method: each turn rendered with the template the model was trained on, one greedy call
    (with the reply's JSON schema when the model learned JSON), the reply read by that template's parser. Named like
    the method it stands for (evaluation.trained_method), so its rows pair with the reference subject's."""

    calls_per_turn = 1

    def __init__(self, name: str, template: TrainedTemplate, role: str, max_tokens: int):
        self.name, self.template, self.role, self.max_tokens = name, template, role, max_tokens

    def predict(self, turns: Sequence[DialogueTurn], chat: Chat, embed: Embed | None = None) -> list[Prediction]:
        t, schema = self.template, self.template.json_schema
        requests = [ChatRequest.of(t.render(turn.history), t.version, schema, temperature=0.0,
                                   max_tokens=self.max_tokens) for turn in turns]
        out = []
        for res in chat(self.role, requests) if requests else []:
            if res.error:
                p = Prediction(raw_output=res.text or None)
                p.fail_llm(res.error)
            else:
                d = t.parse(res.text)
                p = decision_prediction(d, res.text, None if d.action != "invalid"
                                        else f"reply not in the trained format: {t.reply_format}")
            p.prompt_version = t.version
            p.charge(res)
            out.append(p)
        return out


def subject_method(subject: str, model: str, method: str, cfg: EvaluationConfig) -> tuple[Method, str | None]:
    """The method a subject is evaluated with, and why it cannot answer (None when it can). An untrained subject
    runs `method` as configured; a trained one runs only evaluation.trained_method, in its training template
    (a folder that is not built, or holds no recorded template, blocks it with the reason)."""
    role = f"subject:{subject}"
    if training_name(model) is None:
        return build_method(method, cfg, role=role), None
    fallback = build_method(method, cfg, role=role)
    try:
        template = load_trained_template(model, subject)
    except TrainedModelMissing as err:
        return fallback, str(err)
    if method != cfg.trained_method:
        return fallback, (f"subject {subject!r} ({model}) is evaluated only as it was trained: in its {template.name} "
                          f"template, as evaluation.trained_method ({cfg.trained_method!r}), not with {method!r}")
    if template.values_needed():
        return fallback, (f"subject {subject!r} ({model}) was trained on the {template.name} template, which needs "
                          f"{template.values_needed()} that these dialogues do not have: its own group scores it")
    return TemplateMethod(method, template, role, cfg.subject_max_tokens), None


def _side(done: pl.DataFrame, rows: pl.DataFrame, quality: pl.DataFrame | None, key: tuple[str, str, str],
          must_ask: bool) -> dict[str, float | int | None]:
    """One subject's numbers on its evaluated turns (accuracy with a Wilson CI, shares, clarify-class F1 and
    macro-F1, judge score)."""
    m = clarification_metrics(rows, [], must_ask).row(0, named=True)
    acts = done.with_columns(action=pl.when(pl.col("non_question")).then(pl.lit("invalid")).otherwise(pl.col("action")))
    out = {c: m.get(c) for c in SIDE if c in m}
    ref, got = acts["reference_action"].to_list(), acts["action"].to_list()
    out["clarify_f1"] = clarify_f1(ref, got) if done.height else None
    out["macro_f1"] = decision_macro_f1(ref, got) if done.height else None
    q = quality.filter((pl.col("dataset") == key[0]) & (pl.col("subject") == key[1]) & (pl.col("method") == key[2])) \
        if quality is not None and not quality.is_empty() else None
    out["judge_score"] = q["judge_score"][0] if q is not None and q.height else None
    out["judge_n"] = int(q["judge_n"][0]) if q is not None and q.height else 0
    return out


def majority(done: pl.DataFrame) -> tuple[str | None, float | None]:
    """The more frequent reference action of the evaluated turns and the accuracy of always taking it (turns
    weighted as the accuracy is): what a model that learned only the majority action scores."""
    if done.is_empty():
        return None, None
    w = done.group_by("reference_action").agg(pl.col("weight").sum()).sort("weight", "reference_action",
                                                                         descending=[True, False])
    return w["reference_action"][0], float(w["weight"][0] / w["weight"].sum())


def verdict(n_paired: int, diff: float | None, significant: bool, min_n: int,
            accuracy: float | None = None, majority_rate: tuple[str | None, float | None] = (None, None)) -> str:
    """Plain words for the paired result: improved / worse only when significant, else says it did not improve;
    an improvement that does not beat always taking the majority action says so."""
    if not n_paired or diff is None:
        return "not compared (no turns evaluated by both)"
    if n_paired < min_n:
        return f"too few paired turns ({n_paired} < {min_n}) to tell; no improvement shown"
    action, rate = majority_rate
    if significant and diff > 0 and accuracy is not None and rate is not None and accuracy <= rate:
        return (f"improved over the reference, but not above always answering '{action}' ({rate:.1%}): "
                "it learned the majority action, not when to take it")
    if significant:
        return "improved" if diff > 0 else "worse"
    return "no significant difference: does not improve" if diff <= 0 else "higher, but not significantly: no improvement shown"


def trained_comparison(pred: pl.DataFrame, pairs: Sequence[tuple[str, str]], method: str = "base",
                       quality: pl.DataFrame | None = None, alpha: float = 0.05, min_n: int = 10,
                       ttest_min_n: int = 30, clarify_must_be_question: bool = True) -> pl.DataFrame:
    """One row per dataset x (subject, reference) pair, both evaluated with `method` over all turns: each side's n,
    accuracy with a Wilson 95% CI, clarify-class F1 (ClariLM's F1) and macro-F1, protocol compliance, under-/over-clarification and judge score (where
    judged); the paired test on the turns both evaluated, clustered by query (a query's shared turn 1 weighted
    once; sign-flip test below ttest_min_n queries, else the cluster-robust t-test) with the difference's 95% CI,
    and a verdict in words."""
    if pred.is_empty() or not pairs:
        return pl.DataFrame(schema=SCHEMA)
    f = weighted(scored(pred.filter(pl.col("method") == method), clarify_must_be_question), ["dataset", "subject"])
    rows = []
    for dataset in sorted(f["dataset"].unique().to_list()):
        d = f.filter(pl.col("dataset") == dataset)
        for subject, reference in pairs:
            sides = {}
            for who in (subject, reference):
                all_rows = d.filter(pl.col("subject") == who)
                sides[who] = (all_rows, all_rows.filter(pl.col("evaluated")))
            if sides[subject][0].is_empty() or sides[reference][0].is_empty():
                continue
            a, b = sides[subject][1], sides[reference][1]
            pair = a.select("dialogue_id", "turn", "cluster", "weight", s="correct").join(
                b.select("dialogue_id", "turn", r="correct"), on=["dialogue_id", "turn"], how="inner")
            test = clustered_paired_test(pair["s"].cast(pl.Float64).to_list(), pair["r"].cast(pl.Float64).to_list(),
                                         pair["weight"].to_list(), pair["cluster"].to_list(), ttest_min_n)
            n = int(test["n"])
            sig = bool(n >= min_n and test["p"] < alpha)
            mine = _side(a, sides[subject][0], quality, (dataset, subject, method), clarify_must_be_question)
            ref = _side(b, sides[reference][0], quality, (dataset, reference, method), clarify_must_be_question)
            diff = float(test["mean_diff"]) if n else None
            most = majority(a)
            rows.append({"dataset": dataset, "subject": subject, "reference": reference, "method": method, **mine,
                         **{f"ref_{k}": v for k, v in ref.items()}, "majority_action": most[0],
                         "majority_accuracy": most[1], "n_paired": n, "diff": diff,
                         "diff_ci_low": test["diff_ci_low"] if n else None,
                         "diff_ci_high": test["diff_ci_high"] if n else None, "test": test["test"],
                         "p_value": test["p"] if n else None, "significant": sig,
                         "verdict": verdict(n, diff, sig, min_n, mine.get("accuracy"), most)})
    return pl.DataFrame(rows, schema=SCHEMA).fill_nan(None)
