"""Group `annotations` (ClariLM §3.3.3-3.3.5, OFS): CoTAP, preference pairs, SFT / DPO exports for TRL.

sft_dataset and dpo_dataset are stored as Parquet (with ids and provenance) like every asset, and also as
assets/annotations/{sft,dpo}_dataset.jsonl holding only the columns TRL reads:
    datasets.load_dataset("json", data_files="assets/annotations/dpo_dataset.jsonl", split="train")
"""

import os
from pathlib import Path

import dagster as dg
import polars as pl

from dagster_project.core.clarilm.annotations import (
    TRL_DPO_COLUMNS,
    TRL_SFT_COLUMNS,
    answer_requests,
    attach_answers,
    candidate_sets,
    cotap_requests,
    dpo_rows,
    parse_cotap,
    preference_pairs as build_pairs,
    sft_rows,
    trl_export,
)
from dagster_project.llm.client import LLMResource
from dagster_project.resources.params import ParamsResource
from dagster_project.lib.warehouse import ASSETS_DIR

GROUP = "annotations"


def _write_jsonl(df: pl.DataFrame, name: str) -> str:
    path = Path(ASSETS_DIR) / GROUP / f"{name}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    df.write_ndjson(tmp)
    os.replace(tmp, path)
    return str(path)


def _counts(df: pl.DataFrame, col: str, prefix: str) -> dict[str, int]:
    return {f"{prefix}{k}": int(v) for k, v in df.group_by(col).len().drop_nulls(col).iter_rows()}


@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"},
          ins={"question_set": dg.AssetIn(key=["questions", "question_set"]),
               "facet_candidates": dg.AssetIn(key=["facets", "facet_candidates"])})
def cotap_annotations(context: dg.AssetExecutionContext, params: ParamsResource, llm: LLMResource,
                      question_set: pl.DataFrame, facet_candidates: pl.DataFrame) -> pl.DataFrame:
    """CoTAP: per selected question, the reasoner sees C = {c_1..c_n} U {a} and picks ask-which or answer."""
    cfg = params.load().annotations
    sets = candidate_sets(question_set.filter(pl.col("selected")), facet_candidates, cfg.max_candidates)
    need = sets.filter(pl.col("log_answer").is_null())
    areqs = answer_requests(need, cfg.answer_max_tokens)
    ares = llm.chat("answerer", areqs, context)
    sets = attach_answers(sets, need["question_id"].to_list(), areqs, ares)
    reqs = cotap_requests(sets, cfg.reasoning_max_tokens)
    results = llm.chat("reasoner", reqs, context)
    out = parse_cotap(sets, reqs, results).with_columns(source=pl.lit("questions.question_set+facets.facet_candidates"))
    context.add_output_metadata({
        **{f"answerer_{k}": v for k, v in llm.usage("answerer", ares).items()},
        **{f"reasoner_{k}": v for k, v in llm.usage("reasoner", results).items()},
        "questions": out.height, **_counts(out, "status", "status_"), **_counts(out, "decision", "decision_"),
        **_counts(out, "chosen_origin", "chosen_"),
    })
    return out


@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"},
          ins={"cotap_annotations": dg.AssetIn(key=[GROUP, "cotap_annotations"])})
def preference_pairs(context: dg.AssetExecutionContext, params: ParamsResource,
                     cotap_annotations: pl.DataFrame) -> pl.DataFrame:
    """Clarify > Answer, Answer > Clarify and q1 > q2 pairs (chosen / rejected text, type, origins)."""
    out = build_pairs(cotap_annotations, params.load().annotations.max_question_pairs).with_columns(
        source=pl.lit("annotations.cotap_annotations"))
    context.add_output_metadata({"pairs": out.height, **_counts(out, "type", "type_"),
                                 **_counts(out, "chosen_origin", "chosen_"),
                                 "annotations_not_ok": int((cotap_annotations["status"] != "ok").sum())})
    return out


@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"},
          ins={"cotap_annotations": dg.AssetIn(key=[GROUP, "cotap_annotations"])})
def sft_dataset(context: dg.AssetExecutionContext, params: ParamsResource,
                cotap_annotations: pl.DataFrame) -> pl.DataFrame:
    """(q, r+) in TRL's conversational SFT format (`messages`); JSONL export beside the Parquet."""
    cfg = params.load().annotations
    out = sft_rows(cotap_annotations, cfg.system_prompt).with_columns(source=pl.lit("annotations.cotap_annotations"))
    meta = {"examples": out.height, **_counts(out, "decision", "decision_")}
    if cfg.export_jsonl:
        meta["jsonl"] = _write_jsonl(trl_export(out, TRL_SFT_COLUMNS), "sft_dataset")
    context.add_output_metadata(meta)
    return out


@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"},
          ins={"preference_pairs": dg.AssetIn(key=[GROUP, "preference_pairs"])})
def dpo_dataset(context: dg.AssetExecutionContext, params: ParamsResource,
                preference_pairs: pl.DataFrame) -> pl.DataFrame:
    """(q, r+, r-) in TRL's conversational preference format (prompt / chosen / rejected); JSONL export too."""
    cfg = params.load().annotations
    out = dpo_rows(preference_pairs, cfg.system_prompt).with_columns(source=pl.lit("annotations.preference_pairs"))
    meta = {"pairs": out.height, **_counts(out, "type", "type_")}
    if cfg.export_jsonl:
        meta["jsonl"] = _write_jsonl(trl_export(out, TRL_DPO_COLUMNS), "dpo_dataset")
    context.add_output_metadata(meta)
    return out
