"""Which exports each trained LM learned from, in which template, and their user messages: shared by the training
assets (the template they record) and the held_out_disjoint check (what it compares with evaluation queries)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from dagster_project.config import Params
from dagster_project.core.clarilm.fm_log_data import fm_log_template
from dagster_project.core.retrieval import yes_no
from dagster_project.core.training.overlap import record_user_texts, user_texts
from dagster_project.core.training.template import (
    TrainedTemplate,
    clarilm_template,
    double_turn_template,
    intents_template,
)
from dagster_project.io.records import InputFileError, iter_records
from dagster_project.lib.warehouse import ASSETS_DIR, read_asset

# the exports each LM trains on ("group/asset" = a parquet asset; "group/asset:name" = a JSONL export listed in that
# asset's table): what the held_out_disjoint check compares with the evaluation queries. clarilm_dpo continues
# clarilm_sft and both double_turn DPO models continue double_turn_sft, so they have seen both; an intents sweep
# model (intents_tuned_p<pct>) takes intents_tuned's entry.
TRAINED_ON: dict[str, tuple[str, ...]] = {
    "clarilm_sft": ("annotations/sft_dataset",),
    "clarilm_dpo": ("annotations/dpo_dataset", "annotations/sft_dataset"),
    # ClariLM's SFT baselines: SFT-IN3 (an imported training set), SFT-Q^L only (sft_dataset's log questions: the
    # whole export is checked), SFT-Full (both)
    "clarilm_sft_external": ("annotations/sft_external_dataset",),
    "clarilm_sft_ql": ("annotations/sft_dataset",),
    "clarilm_sft_full": ("annotations/sft_dataset", "annotations/sft_external_dataset"),
    "double_turn_sft": ("double_turn/training_exports:sft_dataset",),
    # the double-turn DPO models learn from the pairs of candidates sampled from double_turn_sft (training group)
    "double_turn_dpo": ("training/double_turn_dpo_exports:dpo_dataset", "double_turn/training_exports:sft_dataset"),
    "single_turn_dpo": ("training/double_turn_dpo_exports:dpo_single_turn",
                        "double_turn/training_exports:sft_dataset"),
    "intents_tuned": ("intents/training_conversations",),
    "reranker_generative": ("retrieval/reranker_training",),
}


def _family(name: str) -> str:
    return name if name in TRAINED_ON else next((k for k in TRAINED_ON if name.startswith(f"{k}_")), name)


def trained_on(name: str) -> tuple[str, ...]:
    """The exports model `name` was trained on; KeyError for a name the training group does not build."""
    if _family(name) not in TRAINED_ON:
        raise KeyError(f"training/{name}: the training group builds no such LM; known: {sorted(TRAINED_ON)}")
    return TRAINED_ON[_family(name)]


def model_template(name: str, params: Params) -> TrainedTemplate:
    """The template model `name` is trained on (recorded in its training.json): its exports' own prompt."""
    family = _family(name)
    if family.startswith("clarilm_"):
        return clarilm_template(params.annotations.system_prompt)
    if family in ("double_turn_sft", "double_turn_dpo", "single_turn_dpo"):
        return double_turn_template(params.double_turn.subject_output)
    if family == "intents_tuned":
        return intents_template()
    if family == "fm_log":
        return fm_log_template()
    if family == "reranker_generative":
        return yes_no.template()
    raise KeyError(f"training/{name}: no template known for it")


class MissingExport(LookupError):
    """An export a model is trained on that does not exist (never materialized, not listed, or not written)."""


def export_user_texts(ref: str, all_rows: bool = False) -> list[str]:
    """The user messages of one TRAINED_ON export (every row with `all_rows`, else the rows a `kept` column keeps;
    none for a JSONL export its table lists as not written); MissingExport naming it and why when it does not
    exist (the asset is missing, does not list it, or its file is gone)."""
    asset_ref, _, name = ref.partition(":")
    group, asset_name = asset_ref.split("/")
    frame = read_asset(ASSETS_DIR, group, asset_name)
    if frame is None:
        raise MissingExport(f"{ref}: {ASSETS_DIR}/{group}/{asset_name} does not exist (materialize the {group} group)")
    if not name:
        return user_texts(frame.drop("kept") if all_rows and "kept" in frame.columns else frame)
    hit = frame.filter(pl.col("export") == name) if "export" in frame.columns else frame.head(0)
    if hit.is_empty():
        raise MissingExport(f"{ref}: {asset_ref} lists no export {name!r}")
    r = hit.row(0, named=True)
    if not r["written"]:  # nothing to train on (empty, or blocked on a leak): no model learned from it
        return []
    if not r["path"] or not Path(r["path"]).is_file():
        raise MissingExport(f"{ref}: listed as written but {r['path']} does not exist")
    return record_user_texts(jsonl_records(r["path"]))


def jsonl_records(path: str) -> list[dict[str, Any]]:
    """Every record of an export file; an unparseable line fails the asset naming file and line."""
    out = []
    for rec in iter_records(path):
        if rec.problem:
            raise InputFileError(path, f"{rec.problem}: {rec.detail}", rec.record, rec.field)
        out.append(rec.data)
    return out
