"""Group `facets` (ClariLM §3.2, CFD): FM-LOG samples, FM-LLM brainstorm, fusion with semantic dedup."""

import dagster as dg
import polars as pl

from dagster_project.core.facets import (
    fm_llm_requests,
    fm_log_requests,
    fm_log_training_pairs,
    fuse,
    parse_fm_llm,
    parse_fm_log,
)
from dagster_project.resources.embedder import EmbedderResource
from dagster_project.resources.llm import LLMResource
from dagster_project.resources.params import ParamsResource

GROUP = "facets"


def _status_counts(df: pl.DataFrame) -> dict[str, int]:
    return {f"status_{k}": int(v) for k, v in df.group_by("status").len().iter_rows()}


@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"},
          ins={"question_set": dg.AssetIn(key=["questions", "question_set"]),
               "log_clarifications": dg.AssetIn(key=["logs", "log_clarifications"])})
def facet_candidates_log(context: dg.AssetExecutionContext, params: ParamsResource, llm: LLMResource,
                         question_set: pl.DataFrame, log_clarifications: pl.DataFrame) -> pl.DataFrame:
    """FM-LOG: k sampled (facet, clarifying question) per selected question, demos from log-mined tuples;
    identical facets of one question are marked exact_duplicate."""
    cfg = params.load().facets
    questions = question_set.filter(pl.col("selected"))
    pairs = fm_log_training_pairs(log_clarifications)
    reqs = fm_log_requests(questions, pairs, cfg.log_samples, cfg.log_demos, cfg.log_temperature, cfg.log_top_p,
                           cfg.seed)
    results = llm.chat("extractor", reqs, context)
    out = parse_fm_log(questions, reqs, results)
    context.add_output_metadata({**llm.usage("extractor", results), "questions": questions.height,
                                 "log_demo_pool": pairs.height, "samples": out.height,
                                 "kept": int(out["kept"].sum()), **_status_counts(out)})
    return out


@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"},
          ins={"question_set": dg.AssetIn(key=["questions", "question_set"])})
def facet_candidates_llm(context: dg.AssetExecutionContext, params: ParamsResource, llm: LLMResource,
                         question_set: pl.DataFrame) -> pl.DataFrame:
    """FM-LLM: the generator brainstorms up to llm_max_facets facets + clarifying questions per question."""
    cfg = params.load().facets
    questions = question_set.filter(pl.col("selected"))
    reqs = fm_llm_requests(questions, cfg.llm_max_facets, cfg.seed)
    results = llm.chat("generator", reqs, context)
    out = parse_fm_llm(questions, reqs, results)
    context.add_output_metadata({**llm.usage("generator", results), "questions": questions.height,
                                 "facets": int(out["kept"].sum()), **_status_counts(out)})
    return out


@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"},
          ins={"facet_candidates_log": dg.AssetIn(key=[GROUP, "facet_candidates_log"]),
               "facet_candidates_llm": dg.AssetIn(key=[GROUP, "facet_candidates_llm"])})
def facet_candidates(context: dg.AssetExecutionContext, params: ParamsResource, embedder: EmbedderResource,
                     facet_candidates_log: pl.DataFrame, facet_candidates_llm: pl.DataFrame) -> pl.DataFrame:
    """F(x) = dedup(F_log(x) U F_llm(x)): semantic dedup per question; kept facets keep origin and merged origins."""
    cfg = params.load().facets
    out = fuse(facet_candidates_log, facet_candidates_llm, embedder.encode, cfg.dedup_tau, cfg.dedup_block)
    kept = out.filter(pl.col("kept"))
    context.add_output_metadata({
        "input_facets": out.height, "kept": kept.height, "questions": kept["question_id"].n_unique(),
        "kept_from_log": int((kept["origin"] == "log").sum()), "kept_from_llm": int((kept["origin"] == "llm").sum()),
        "semantic_duplicates": int((out["dedup_reason"] == "semantic").sum()),
    })
    return out
