"""Headline numbers per group as small JSON files (DVC metrics), accuracy-by-turn tables and training loss curves
(DVC plots).

Reads the built assets' Parquet tables (never runs anything), so `dvc exp show --only-metrics` and
`dvc metrics diff` compare experiments by their results instead of by 280 param columns.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import polars as pl

from dagster_project.config import MODEL_NAMES
from dagster_project.io.writers import atomic_path
from dagster_project.lib.warehouse import ASSETS_DIR, read_asset

METRICS_DIR = "metrics"
PLOTS_DIR = "plots"
ACCURACY_BY_TURN = "accuracy_by_turn"
# ClariLM: the assets of its four stages whose rows and pass rate (share `kept`, else share `status == ok`) count
CLARILM_ASSETS = (("logs", "log_candidates"), ("logs", "log_clarifications"),
                  ("questions", "seed_questions_ql"), ("questions", "seed_questions_qg"), ("questions", "question_set"),
                  ("facets", "facet_candidates_log"), ("facets", "facet_candidates_llm"), ("facets", "facet_candidates"),
                  ("annotations", "cotap_annotations"), ("annotations", "preference_pairs"),
                  ("annotations", "sft_dataset"), ("annotations", "dpo_dataset"))
# the asset groups the headline reads (dvc.yaml: the `metrics` stage's deps)
SOURCE_GROUPS = ("evaluation", "retrieval", "intents", "double_turn", *dict.fromkeys(g for g, _ in CLARILM_ASSETS),
                 "training")
INTENT_METRICS = ("ic_accuracy", "sdrs", "ars", "ood_accuracy", "ood_dropout_accuracy")
ANSWER_SET_METRICS = ("f1_total", "f1_ambiguous", "f1_unambiguous", "avg_turns")
LOSS_CURVE = "loss_curve"
TRAINING_METRICS = ("rows", "steps", "final_loss", "wall_s", "tokens_per_s")


def _num(v: object) -> float | int | None:
    """A JSON-safe number: NaN / inf become null (JSON has neither), floats rounded to 4 places."""
    if v is None or isinstance(v, bool):
        return None if v is None else int(v)
    if isinstance(v, float):
        return None if not math.isfinite(v) else round(v, 4)
    return v if isinstance(v, int) else None


def _nest(rows: list[dict], keys: list[str], values: list[str]) -> dict:
    """{k1: {k2: {value: number}}}: DVC flattens the nesting into column names like `smollm2.base.accuracy`."""
    out: dict = {}
    for r in rows:
        node = out
        for k in keys:
            node = node.setdefault(str(r[k]), {})
        node.update({v: _num(r.get(v)) for v in values if v in r})
    return out


def evaluation(base: str | Path) -> dict | None:
    """Accuracy and ask/answer macro-F1 over all turns per dataset x subject x method (method_comparison)."""
    t = read_asset(base, "evaluation", "method_comparison")
    if t is None or t.is_empty() or "scope" not in t.columns:
        return None
    t = t.filter(pl.col("scope") == "all_turns")
    return _nest(t.to_dicts(), ["dataset", "subject", "method"], ["accuracy", "macro_f1", "n"]) or None


def retrieval(base: str | Path) -> dict | None:
    """MRR, nDCG@k and P@k (overall) per ranker x input x modality."""
    t = read_asset(base, "retrieval", "retrieval_metrics")
    if t is None or t.is_empty():
        return None
    cols = [c for c in t.columns if c == "mrr" or c.startswith(("ndcg_at_", "p_at_"))]
    return _nest(t.filter(pl.col("breakdown") == "overall").to_dicts(), ["ranker", "input", "modality"],
                 ["n_queries", *cols]) or None


def intents(base: str | Path) -> dict | None:
    """Intent-classification accuracy, SDRS and ARS per subject (intent_eval)."""
    t = read_asset(base, "intents", "intent_eval")
    if t is None or t.is_empty():
        return None
    return _nest(t.to_dicts(), ["subject"], list(INTENT_METRICS)) or None


def double_turn(base: str | Path) -> dict | None:
    """Answer-set F1 (total / ambiguous / unambiguous) and average turns per subject x system."""
    t = read_asset(base, "double_turn", "answer_set_eval")
    if t is None or t.is_empty():
        return None
    return _nest(t.to_dicts(), ["subject", "system"], list(ANSWER_SET_METRICS)) or None


def clarilm(base: str | Path) -> dict | None:
    """Rows per ClariLM asset and its pass rate (share kept, or share with status ok); absent assets left out."""
    out: dict = {}
    for group, name in CLARILM_ASSETS:
        t = read_asset(base, group, name)
        if t is None:
            continue
        row: dict = {"rows": t.height}
        if "kept" in t.columns:
            row["pass_rate"] = _num(t["kept"].cast(pl.Float64).mean())
        elif "status" in t.columns:
            row["pass_rate"] = _num((t["status"] == "ok").cast(pl.Float64).mean())
        out.setdefault(group, {})[name] = row
    return out or None


def training(base: str | Path) -> dict | None:
    """Per trained model (assets/training/<asset>.parquet rows): rows, steps, final loss, wall time, tokens/s; and
    the re-ranker evaluation's MRR / nDCG per ranker."""
    out: dict = {}
    for name in MODEL_NAMES:
        t = read_asset(base, "training", name)
        if t is not None:
            out.update(_nest(t.filter(pl.col("status") != "skipped_no_data").to_dicts(), ["model"],
                             list(TRAINING_METRICS)))
    ev = read_asset(base, "training", "reranker_eval")
    if ev is not None and not ev.is_empty():
        cols = [c for c in ev.columns if c == "mrr" or c.startswith("ndcg_at_")]
        out["reranker_eval"] = _nest(ev.to_dicts(), ["ranker"], ["n_queries", *cols])
    return out or None


HEADLINES: dict[str, Callable[[str | Path], dict | None]] = {
    "evaluation": evaluation, "retrieval": retrieval, "intents": intents, "double_turn": double_turn,
    "clarilm": clarilm, "training": training}


def accuracy_by_turn(base: str | Path) -> dict[str, pl.DataFrame]:
    """One small table (turn, accuracy, n) per dataset x subject x method, from metric_tables' by_turn rows."""
    t = read_asset(base, "evaluation", "metric_tables")
    if t is None or "breakdown" not in t.columns:
        return {}
    t = t.filter(pl.col("breakdown") == "by_turn")
    out = {}
    for (dataset, subject, method), g in t.group_by(["dataset", "subject", "method"]):
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{dataset}-{subject}-{method}")
        out[name] = g.select("turn", "accuracy", "n").sort("turn")
    return dict(sorted(out.items()))


def loss_curves(base: str | Path) -> dict[str, pl.DataFrame]:
    """(step, loss) per trained model folder assets/training/<model>/loss_curve.parquet."""
    out = {}
    for path in sorted(Path(base, "training").glob("*/loss_curve.parquet")):
        t = pl.read_parquet(path)
        if {"step", "loss"} <= set(t.columns):
            out[path.parent.name] = t.select("step", "loss").sort("step")
    return out


def _write_json(data: dict, path: Path) -> None:
    with atomic_path(path, ".json") as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def write_headlines(base: str | Path = ASSETS_DIR, metrics_dir: str | Path = METRICS_DIR,
                    plots_dir: str | Path = PLOTS_DIR) -> tuple[list[str], list[str]]:
    """Write metrics_dir/<group>.json for every group whose tables exist, plots_dir/accuracy_by_turn/*.csv and
    plots_dir/loss_curve/<model>.csv.

    A group without its tables gets no file (a stale one is removed), never an error.
    Returns (groups written, groups left out)."""
    metrics_dir, plots_dir = Path(metrics_dir), Path(plots_dir)
    metrics_dir.mkdir(parents=True, exist_ok=True)
    written, missing = [], []
    for group, headline in HEADLINES.items():
        data = headline(base)
        target = metrics_dir / f"{group}.json"
        if data is None:
            missing.append(group)
            target.unlink(missing_ok=True)
            continue
        _write_json({group: data}, target)  # the group's name heads every column of `dvc exp show`
        written.append(group)
    for plot, tables in ((ACCURACY_BY_TURN, accuracy_by_turn(base)), (LOSS_CURVE, loss_curves(base))):
        folder = plots_dir / plot
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for name, table in tables.items():
            with atomic_path(folder / f"{name}.csv", ".csv") as tmp:
                table.write_csv(tmp)
    return written, missing
