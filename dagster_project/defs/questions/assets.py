"""Group `questions` (ClariLM §3.3.1-3.3.2): Q^L from the logs' first questions, personas, Q^G."""

import dagster as dg
import polars as pl

from dagster_project.config import Params
from dagster_project.io.formats.clarilm_inputs import load_personas
from dagster_project.core.clarilm.question_generation import (
    seed_questions_qg as build_qg,
)
from dagster_project.core.clarilm.questions import seed_questions_ql as build_ql
from dagster_project.core.clarilm.questions import select_questions
from dagster_project.core.clarilm.split import assign_split
from dagster_project.lib.assets import group_asset, upstream, value_counts
from dagster_project.lib.resources import EmbedderResource, LLMResource

GROUP = "questions"
asset = group_asset(GROUP)


@asset(ins=upstream("logs/raw_logs"))
def seed_questions_ql(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                      llm: dg.ResourceParam[LLMResource], embedder: EmbedderResource,
                      raw_logs: pl.DataFrame) -> pl.DataFrame:
    """Q^L: each conversation's first user question; rules, then the LLM filter, then dedup. All rows stay."""
    chat = llm.session(context)
    out, dedup = build_ql(chat, raw_logs, params.questions, embedder.encode)
    context.add_output_metadata({**chat.usage(), **dedup, "first_questions": out.height, "kept": int(out["kept"].sum()),
                                 **value_counts(out, "reject_reason", "rejected_")})
    return out


@asset
def personas(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params]) -> pl.DataFrame:
    """The persona pool (shipped list in questions.personas_path); `selected` marks the first n_personas."""
    cfg = params.questions
    out = load_personas(cfg.personas_path).with_row_index("rank").with_columns(
        selected=pl.col("rank") < cfg.n_personas, source=pl.lit(cfg.personas_path)).drop("rank")
    context.add_output_metadata({"personas": out.height, "selected": int(out["selected"].sum())})
    return out


@asset(ins=upstream("questions/seed_questions_ql", "questions/personas"))
def seed_questions_qg(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                      llm: dg.ResourceParam[LLMResource], embedder: EmbedderResource,
                      seed_questions_ql: pl.DataFrame, personas: pl.DataFrame) -> pl.DataFrame:
    """Q^G: persona -> topic -> question (ICL demos from Q^L + seed files), keep/enrich/simplify, dedup vs Q^L."""
    chat = llm.session(context)
    out, pool, dedup = build_qg(chat, seed_questions_ql, personas, params.questions, embedder.encode)
    context.add_output_metadata({
        **chat.usage(), **dedup, "generated": out.height, "kept": int(out["kept"].sum()), "demo_pool": pool,
        **value_counts(out, "transformation", "transform_"), **value_counts(out, "reject_reason", "rejected_"),
    })
    return out


@asset(ins=upstream("questions/seed_questions_ql", "questions/seed_questions_qg"))
def question_set(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                 seed_questions_ql: pl.DataFrame, seed_questions_qg: pl.DataFrame) -> pl.DataFrame:
    """Q = (Q^L, Q^G): every kept question; `selected` marks those sent on to CFD/OFS (questions.max_selected),
    `split` their seeded, query-disjoint train / test split (questions.test_fraction, questions.seed)."""
    cfg = params.questions
    out = assign_split(select_questions(seed_questions_ql, seed_questions_qg, cfg.max_selected),
                       cfg.test_fraction, cfg.seed)
    context.add_output_metadata({"questions": out.height, "selected": int(out["selected"].sum()),
                                 **value_counts(out, "question_source", "from_"), **value_counts(out, "split", "split_")})
    return out
