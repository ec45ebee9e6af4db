"""Group `facets` (ClariLM §3.2, CFD): FM-LOG samples, FM-LLM brainstorm, fusion with semantic dedup."""

import dagster as dg
import polars as pl

from dagster_project.config import Params
from dagster_project.core.shared.dedup import ann_search
from dagster_project.core.clarilm.facets import (
    FM_LOG,
    fm_llm,
    fm_log,
    fm_log_training_pairs,
    fuse,
)
from dagster_project.lib.assets import group_asset, status_counts, upstream
from dagster_project.lib.resources import EmbedderResource, LLMResource
from dagster_project.llm.trained import training_name

asset = group_asset("facets")


@asset(ins=upstream("questions/question_set", "logs/log_clarifications"))
def facet_candidates_log(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                         llm: dg.ResourceParam[LLMResource], question_set: pl.DataFrame,
                         log_clarifications: pl.DataFrame) -> pl.DataFrame:
    """FM-LOG: k sampled (facet, clarifying question) per selected question, demos from log-mined tuples;
    identical facets of one question are marked exact_duplicate. The metadata's fm_log_miner says which model ran:
    the prompted stand-in, or the trained training/fm_log when llm.roles["extractor:fm_log"] names it."""
    cfg = params.facets
    questions = question_set.filter(pl.col("selected"))
    pairs = fm_log_training_pairs(log_clarifications)
    chat = llm.session(context)
    out = fm_log(chat, questions, pairs, cfg.log_samples, cfg.log_demos, cfg.log_temperature, cfg.log_top_p, cfg.seed)
    role = params.llm.role(FM_LOG.role)
    miner = (f"trained {role.model}" if training_name(role.model)
             else f"prompted {cfg.log_demos}-shot stand-in ({role.backend}:{role.model})")
    context.add_output_metadata({**chat.usage(), "fm_log_miner": miner, "questions": questions.height,
                                 "log_demo_pool": pairs.height,
                                 "samples": out.height, "kept": int(out["kept"].sum()), **status_counts(out)})
    return out


@asset(ins=upstream("questions/question_set"))
def facet_candidates_llm(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                         llm: dg.ResourceParam[LLMResource], question_set: pl.DataFrame) -> pl.DataFrame:
    """FM-LLM: the generator brainstorms up to llm_max_facets facets + clarifying questions per question."""
    cfg = params.facets
    questions = question_set.filter(pl.col("selected"))
    chat = llm.session(context)
    out = fm_llm(chat, questions, cfg.llm_max_facets, cfg.seed)
    context.add_output_metadata({**chat.usage(), "questions": questions.height,
                                 "facets": int(out["kept"].sum()), **status_counts(out)})
    return out


@asset(ins=upstream("facets/facet_candidates_log", "facets/facet_candidates_llm"))
def facet_candidates(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params], embedder: EmbedderResource,
                     facet_candidates_log: pl.DataFrame, facet_candidates_llm: pl.DataFrame) -> pl.DataFrame:
    """F(x) = dedup(F_log(x) U F_llm(x)): semantic dedup per question; kept facets keep origin and merged origins."""
    cfg = params.facets
    out, dedup = fuse(facet_candidates_log, facet_candidates_llm, embedder.encode, cfg.dedup_tau, cfg.dedup_block,
                      ann_search(cfg))
    kept = out.filter(pl.col("kept"))
    context.add_output_metadata({
        "input_facets": out.height, "kept": kept.height, "questions": kept["question_id"].n_unique(),
        "kept_from_log": int((kept["origin"] == "log").sum()), "kept_from_llm": int((kept["origin"] == "llm").sum()),
        "semantic_duplicates": int((out["dedup_reason"] == "semantic").sum()), **dedup,
    })
    return out
