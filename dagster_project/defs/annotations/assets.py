"""Group `annotations` (ClariLM §3.3.3-3.3.5, OFS): CoTAP, preference pairs, SFT / DPO exports for TRL, and
the held-out test split (§4.2 "Our-test"), which is never exported for training.

sft_dataset and dpo_dataset are stored as Parquet (with ids and provenance) like every asset, and also as
assets/annotations/{sft,dpo}_dataset.jsonl holding only the columns TRL reads:
    datasets.load_dataset("json", data_files="assets/annotations/dpo_dataset.jsonl", split="train")
"""

from pathlib import Path

import dagster as dg
import polars as pl

from dagster_project.config import Params
from dagster_project.core.clarilm.annotations import (
    TRL_DPO_COLUMNS,
    TRL_SFT_COLUMNS,
    dpo_rows,
    held_out_rows,
    sft_rows,
    trl_export,
)
from dagster_project.core.clarilm.annotations import (
    cotap_annotations as annotate,
)
from dagster_project.core.clarilm.annotations import (
    preference_pairs as build_pairs,
)
from dagster_project.io.status import Status
from dagster_project.io.writers import write_jsonl_atomic
from dagster_project.lib.assets import group_asset, upstream, value_counts
from dagster_project.lib.resources import LLMResource
from dagster_project.lib.warehouse import ASSETS_DIR

GROUP = "annotations"
asset = group_asset(GROUP)


def _write_jsonl(df: pl.DataFrame, name: str) -> str:
    path = Path(ASSETS_DIR) / GROUP / f"{name}.jsonl"
    write_jsonl_atomic(df, path)
    return str(path)


@asset(ins=upstream("questions/question_set", "facets/facet_candidates"))
def cotap_annotations(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                      llm: dg.ResourceParam[LLMResource], question_set: pl.DataFrame,
                      facet_candidates: pl.DataFrame) -> pl.DataFrame:
    """CoTAP: per selected question, the reasoner sees C = {c_1..c_n} U {a} and picks ask-which or answer."""
    chat = llm.session(context)
    out = annotate(chat, question_set, facet_candidates, params.annotations).with_columns(
        source=pl.lit("questions.question_set+facets.facet_candidates"))
    context.add_output_metadata({
        **chat.usage(), "questions": out.height, **value_counts(out, "status", "status_"),
        **value_counts(out, "decision", "decision_"), **value_counts(out, "chosen_origin", "chosen_"),
    })
    return out


@asset(ins=upstream("annotations/cotap_annotations"))
def preference_pairs(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                     cotap_annotations: pl.DataFrame) -> pl.DataFrame:
    """Clarify > Answer, Answer > Clarify and q1 > q2 pairs (chosen / rejected text, type, origins)."""
    out = build_pairs(cotap_annotations, params.annotations.max_question_pairs).with_columns(
        source=pl.lit("annotations.cotap_annotations"))
    context.add_output_metadata({"pairs": out.height, **value_counts(out, "type", "type_"),
                                 **value_counts(out, "chosen_origin", "chosen_"),
                                 "annotations_not_ok": int((cotap_annotations["status"] != Status.OK.value).sum())})
    return out


@asset(ins=upstream("annotations/cotap_annotations"))
def sft_dataset(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                cotap_annotations: pl.DataFrame) -> pl.DataFrame:
    """(q, r+) in TRL's conversational SFT format (`messages`); JSONL export beside the Parquet."""
    cfg = params.annotations
    out = sft_rows(cotap_annotations, cfg.system_prompt).with_columns(source=pl.lit("annotations.cotap_annotations"))
    meta = {"examples": out.height, **value_counts(out, "decision", "decision_")}
    if cfg.export_jsonl:
        meta["jsonl"] = _write_jsonl(trl_export(out, TRL_SFT_COLUMNS), "sft_dataset")
    context.add_output_metadata(meta)
    return out


@asset(ins=upstream("annotations/preference_pairs"))
def dpo_dataset(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                preference_pairs: pl.DataFrame) -> pl.DataFrame:
    """(q, r+, r-) in TRL's conversational preference format (prompt / chosen / rejected); JSONL export too."""
    cfg = params.annotations
    out = dpo_rows(preference_pairs, cfg.system_prompt).with_columns(source=pl.lit("annotations.preference_pairs"))
    meta = {"pairs": out.height, **value_counts(out, "type", "type_")}
    if cfg.export_jsonl:
        meta["jsonl"] = _write_jsonl(trl_export(out, TRL_DPO_COLUMNS), "dpo_dataset")
    context.add_output_metadata(meta)
    return out


@asset(ins=upstream("annotations/cotap_annotations"))
def held_out_set(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                 cotap_annotations: pl.DataFrame) -> pl.DataFrame:
    """The held-out test questions (question_set split = test) with CoTAP's pick as reference action / question."""
    out = held_out_rows(cotap_annotations, params.annotations.system_prompt).with_columns(
        source=pl.lit("annotations.cotap_annotations"))
    context.add_output_metadata({"questions": out.height, **value_counts(out, "reference_action", "reference_"),
                                 **value_counts(out, "status", "status_")})
    return out
