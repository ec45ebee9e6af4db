"""Appendix A top-percentile curation by SDRS, §2.2.1 label-dropout OOD examples, and Appendix C training rows
(TRL conversational `messages`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import polars as pl

from dagster_project.io.status import Status
from dagster_project.config import IntentsConfig
from dagster_project.core.intents.assistant import training_system_prompt
from dagster_project.core.intents.catalog import OOD_TARGET, Catalog
from dagster_project.core.intents.simulation import PREDICTION_OUTCOMES
from dagster_project.llm.chat import Message

MESSAGE_TYPE = pl.List(pl.Struct({"role": pl.Utf8, "content": pl.Utf8}))
TRAINING_SCHEMA = {
    "conversation_id": pl.Utf8, "kind": pl.Utf8, "method": pl.Utf8, "split": pl.Utf8, "query_id": pl.Utf8,
    "true_intent": pl.Utf8, "target": pl.Utf8, "candidate_intents": pl.List(pl.Utf8), "label_dropout": pl.Boolean,
    "dropout_source": pl.Utf8, "outcome": pl.Utf8, "n_turns": pl.Int64, "sdrs": pl.Float64, "sdrs_rank": pl.Int64,
    "cut_sdrs": pl.Float64,
    "kept": pl.Boolean, "removed_reason": pl.Utf8, "messages": MESSAGE_TYPE, "n_messages": pl.Int64,
}


def keep_count(n: int, percentile: float) -> int:
    """How many of n conversations the top `percentile` % keeps: ceil(n * p / 100)."""
    return min(n, math.ceil(n * percentile / 100 - 1e-9))


def _removed(r: dict[str, Any], k: int, cut: float | None, n: int, keep_percentile: float,
             require_correct: bool) -> str | None:
    if r["sdrs_rank"] > k:
        if cut is None:
            return f"top {keep_percentile:g}% of {n} keeps none"
        if r["sdrs"] == cut:
            return f"tied at the cut SDRS {cut:.3f}; ties broken by conversation_id"
        return f"below the top {keep_percentile:g}% by SDRS (cut {cut:.3f})"
    if r["outcome"] not in PREDICTION_OUTCOMES:
        return f"no final prediction (outcome {r['outcome']})"
    if require_correct and r["outcome"] != "correct":
        return f"final outcome {r['outcome']} (require_correct)"
    return None


def top_percentile_cut(conv: pl.DataFrame, keep_percentile: float, require_correct: bool = True) -> pl.DataFrame:
    """Rank conversations by SDRS (high first) and keep the top `keep_percentile` %: exactly ceil(n * p / 100) of
    the n scored ones. Ties at the cut are broken by conversation_id (ascending), so the count is exact and the
    result reproducible; a tied conversation left out says so in removed_reason. A kept-rank conversation that
    never reached a final prediction (max_turns, invalid_reply) is removed whatever require_correct says: Appendix C
    training examples end with the predicted intent. With require_correct, a kept-rank conversation whose final
    intent was not the true one is removed too. Unscored conversations (no SDRS) are removed with their score
    status. Adds sdrs_rank, cut_sdrs, kept, removed_reason."""
    scored = conv.filter(pl.col("sdrs").is_not_null()).sort(["sdrs", "conversation_id"], descending=[True, False])
    k = keep_count(scored.height, keep_percentile)
    cut = scored["sdrs"][k - 1] if k > 0 else None
    scored = scored.with_columns(sdrs_rank=pl.int_range(1, scored.height + 1, dtype=pl.Int64))
    rows = []
    for r in scored.iter_rows(named=True):
        reason = _removed(r, k, cut, scored.height, keep_percentile, require_correct)
        rows.append({"conversation_id": r["conversation_id"], "sdrs_rank": r["sdrs_rank"], "kept": reason is None,
                     "removed_reason": reason})
    ranked = pl.DataFrame(rows, schema={"conversation_id": pl.Utf8, "sdrs_rank": pl.Int64, "kept": pl.Boolean,
                                        "removed_reason": pl.Utf8})
    out = conv.join(ranked, on="conversation_id", how="left")
    return out.with_columns(
        kept=pl.col("kept").fill_null(False),
        removed_reason=pl.when(pl.col("sdrs").is_null()).then(pl.format("no SDRS ({})", pl.col("score_status")))
        .otherwise(pl.col("removed_reason")),
        cut_sdrs=pl.lit(cut, pl.Float64), keep_percentile=pl.lit(float(keep_percentile)))


def keep_percentile_sweep(conv: pl.DataFrame, percentiles: list[float]) -> pl.DataFrame:
    """Table 4 layout on the generated data: for each percentile, of n_total conversations the n_scored with an SDRS
    (the rest failed outside the assistant or lost their judge call), how many the cut keeps,
    their mean SDRS and the SDRS at the cut. (The paper reports the SDRS of a model fine-tuned on each subset; that
    model is `training/intents_tuned_p<pct>` with intents.sweep_train: true.)"""
    s = conv.filter(pl.col("sdrs").is_not_null()).sort(["sdrs", "conversation_id"], descending=[True, False])
    rows = []
    for p in percentiles:
        k = keep_count(s.height, p)
        top = s.head(k)["sdrs"]
        rows.append({"percentile": float(p), "n_total": conv.height, "n_scored": s.height, "n_kept": k,
                     "mean_sdrs_kept": float(top.mean()) if k else None,
                     "cut_sdrs": float(top[-1]) if k else None,
                     "n_correct_kept": int((s.head(k)["outcome"] == "correct").sum())})
    return pl.DataFrame(rows, schema={"percentile": pl.Float64, "n_total": pl.Int64, "n_scored": pl.Int64,
                                      "n_kept": pl.Int64,
                                      "mean_sdrs_kept": pl.Float64, "cut_sdrs": pl.Float64,
                                      "n_correct_kept": pl.Int64})


def label_dropout_sources(conversation_ids: list[str], n: int, seed: int) -> list[str]:
    """The unambiguous conversations that each give one extra label-dropout example: min(n, available) of them,
    drawn without replacement with a seed, in sorted order."""
    ids = sorted(conversation_ids)
    k = min(n, len(ids))
    picked = np.random.default_rng(seed).choice(len(ids), size=k, replace=False).tolist() if k else []
    return [ids[i] for i in sorted(picked)]


DROPOUT_SUFFIX = "-dropout"


def _dropout_row(src: dict[str, Any], first_message: str, catalog: Catalog, demos: list[list[Message]],
                 cfg: IntentsConfig) -> dict[str, Any]:
    """A new OOD example made from an unambiguous conversation: its utterance, the true intent left out of the
    candidates (system prompt, demos and examples too), target "out of domain"."""
    cands = [c for c in catalog.names if c != src["true_intent"]]
    system = training_system_prompt(catalog, cands, demos, cfg.examples_per_intent)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": first_message},
                {"role": "assistant", "content": OOD_TARGET}]
    return {"conversation_id": src["conversation_id"] + DROPOUT_SUFFIX, "kind": src["kind"], "method": src["method"],
            "split": src["split"], "query_id": src["query_id"], "true_intent": src["true_intent"],
            "target": OOD_TARGET, "candidate_intents": cands, "label_dropout": True,
            "dropout_source": src["conversation_id"], "outcome": None, "n_turns": 1, "sdrs": None, "sdrs_rank": None,
            "cut_sdrs": None, "kept": True, "removed_reason": None, "messages": messages, "n_messages": len(messages)}


def training_conversations(turns: pl.DataFrame, conv: pl.DataFrame, catalog: Catalog, demos: list[list[Message]],
                           cfg: IntentsConfig) -> pl.DataFrame:
    """One row per simulated conversation with `kept`, `removed_reason` and TRL `messages` (Appendix C), plus the
    label-dropout OOD examples (§2.2.1) as extra rows.

    Every simulated conversation goes through the SDRS cut (cfg.keep_percentile, cfg.require_correct). Label
    dropout then ADDS cfg.n_label_dropout new examples (the paper adds 200), each made from a seeded unambiguous
    conversation's utterance with its true intent removed from the candidates and target "out of domain"; the
    source conversation stays in the in-domain set. Dropout rows are kept (their SDRS would score another target)
    and name their source in dropout_source.
    """
    ranked = top_percentile_cut(conv, cfg.keep_percentile, cfg.require_correct)
    by_conv = {cid: t.sort("message_index") for (cid,), t in turns.group_by(["conversation_id"])}
    rows = []
    for r in ranked.iter_rows(named=True):
        t = by_conv[r["conversation_id"]]
        msgs = [{"role": m["speaker"], "content": m["text"]} for m in t.iter_rows(named=True)
                if m["text"] is not None and m["status"] == Status.OK]
        cands = t["candidate_intents"][0].to_list()
        messages = [{"role": "system", "content": training_system_prompt(catalog, cands, demos,
                                                                          cfg.examples_per_intent)}, *msgs]
        rows.append({
            "conversation_id": r["conversation_id"], "kind": r["kind"], "method": r["method"], "split": r["split"],
            "query_id": r["query_id"], "true_intent": r["true_intent"], "target": r["true_intent"],
            "candidate_intents": cands, "label_dropout": False, "dropout_source": None, "outcome": r["outcome"],
            "n_turns": r["n_turns"], "sdrs": r["sdrs"], "sdrs_rank": r.get("sdrs_rank"), "cut_sdrs": r.get("cut_sdrs"),
            "kept": bool(r["kept"]), "removed_reason": r["removed_reason"], "messages": messages,
            "n_messages": len(messages)})
    una = conv.filter(pl.col("kind") == "unambiguous")
    by_id = {r["conversation_id"]: r for r in una.iter_rows(named=True)}
    for cid in label_dropout_sources(list(by_id), cfg.n_label_dropout, cfg.seed):
        rows.append(_dropout_row(by_id[cid], by_conv[cid]["text"][0], catalog, demos, cfg))
    return pl.DataFrame(rows, schema=TRAINING_SCHEMA).sort("conversation_id")


def trl_rows(rows: pl.DataFrame) -> list[dict[str, Any]]:
    """Kept rows as TRL conversational records: one {"messages": [...]} per conversation (a JSONL line each)."""
    return [{"messages": m} for m in rows.filter(pl.col("kept"))["messages"].to_list()]
