"""Group `annotations` (ClariLM §3.3.3-3.3.5, OFS): CoTAP, preference pairs, SFT / DPO exports for TRL, and
the held-out test split (§4.2 "Our-test"), which is never exported for training.

sft_dataset and dpo_dataset are stored as Parquet (with ids and provenance) like every asset, and also as
assets/annotations/{sft,dpo}_dataset.jsonl holding only the columns TRL reads:
    datasets.load_dataset("json", data_files="assets/annotations/dpo_dataset.jsonl", split="train")
"""

from pathlib import Path

import dagster as dg
import polars as pl

from dagster_project.config import CLARILM_DATASET, Params
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
from dagster_project.core.clarilm.sft_baselines import SFT_EXTERNAL_SCHEMA, external_sft_rows, first_questions
from dagster_project.core.clarifymt.external import import_dataset
from dagster_project.io.records import InputFileError, Quarantine
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


def evaluation_queries(params: Params, cotap_annotations: pl.DataFrame) -> tuple[list[str], dict[str, int]]:
    """The first questions of the evaluation sets this group can see (ClariLM's held-out split clarilm_test and every
    evaluation.external dataset in evaluation.datasets), and how many per set."""
    queries, counts = [], {}
    for name in params.evaluation.datasets:
        if name == CLARILM_DATASET:
            got = cotap_annotations.filter(pl.col("split") == "test")["question"].drop_nulls().to_list()
        elif name in params.evaluation.external:
            ds = params.evaluation.external[name]
            try:
                turns = import_dataset(name, ds.format, ds.path, ds.limit, ds.clariq_clarify_from,
                                       ds.max_field_chars).turns
            except InputFileError as err:
                raise dg.Failure(description=f"evaluation.external.{name}: {err}") from None
            got = first_questions(turns)["query"].drop_nulls().to_list()
        else:
            continue
        queries += got
        counts[name] = len(got)
    return queries, counts


@dg.multi_asset(
    group_name=GROUP, can_subset=False, ins=upstream("annotations/cotap_annotations"),
    outs={"sft_external_dataset": dg.AssetOut(key=[GROUP, "sft_external_dataset"], kinds={"polars"}),
          "sft_external_dataset_rejected": dg.AssetOut(key=[GROUP, "sft_external_dataset_rejected"],
                                                       kinds={"polars"})},
)
def sft_external_dataset(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                         llm: dg.ResourceParam[LLMResource], cotap_annotations: pl.DataFrame):
    """annotations.sft_external (IN3 / ClariQ / ... training files) as SFT rows in ClariLM's template: the dataset's
    clarify label + its clarifying question, or "no" + the answerer's answer (the data has none); a dialogue whose
    first question is an evaluation query is not kept. Malformed records go to sft_external_dataset_rejected."""
    cfg = params.annotations
    held_out, counts = evaluation_queries(params, cotap_annotations)
    turns, rejected, meta = [], Quarantine(), {}
    for name, ds in cfg.sft_external.items():
        try:
            res = import_dataset(name, ds.format, ds.path, ds.limit, ds.clariq_clarify_from, ds.max_field_chars,
                                 key=f"annotations.sft_external.{name}")
        except InputFileError as err:
            raise dg.Failure(description=str(err)) from None
        turns.append(res.turns)
        rejected.rows.extend(res.rejected.rows)
        meta |= {f"{name}/{k}": v for k, v in res.summary().items()}
    chat = llm.session(context)
    out = (external_sft_rows(chat, pl.concat(turns), cfg.system_prompt, held_out, cfg.answer_max_tokens)
           if turns else pl.DataFrame(schema=SFT_EXTERNAL_SCHEMA))
    out = out.with_columns(source=pl.lit("annotations.sft_external"))
    kept = out.filter(pl.col("kept"))
    if cfg.export_jsonl:
        meta["jsonl"] = _write_jsonl(trl_export(kept, TRL_SFT_COLUMNS), "sft_external_dataset")
    context.add_output_metadata({
        **chat.usage(), **meta, "examples": kept.height, "not_kept": out.height - kept.height,
        **value_counts(out, "reason", "not_kept_"), **value_counts(kept, "decision", "decision_"),
        **{f"evaluation_queries_{k}": v for k, v in counts.items()}}, output_name="sft_external_dataset")
    context.add_output_metadata({"rejected": len(rejected)}, output_name="sft_external_dataset_rejected")
    return out, rejected.frame()
