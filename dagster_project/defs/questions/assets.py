"""Group `questions` (ClariLM §3.3.1-3.3.2): Q^L from the logs' first questions, personas, Q^G."""

import dagster as dg
import polars as pl

from dagster_project.core.clarilm.questions import (
    apply_dedup,
    apply_transforms,
    dedup_against,
    first_questions,
    llm_reason,
    load_personas,
    load_seed_questions,
    parse_qg,
    parse_ql_filter,
    ql_filter_requests,
    ql_rules,
    qg_plan,
    qg_requests,
    select_questions,
    transform_requests,
)
from dagster_project.lib.embedder import EmbedderResource
from dagster_project.llm.client import LLMResource
from dagster_project.resources.params import ParamsResource

GROUP = "questions"


def _counts(df: pl.DataFrame, col: str) -> dict[str, int]:
    return {str(k): int(v) for k, v in df.group_by(col).len().drop_nulls(col).iter_rows()}


@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"},
          ins={"raw_logs": dg.AssetIn(key=["logs", "raw_logs"])})
def seed_questions_ql(context: dg.AssetExecutionContext, params: ParamsResource, llm: LLMResource,
                      embedder: EmbedderResource, raw_logs: pl.DataFrame) -> pl.DataFrame:
    """Q^L: each conversation's first user question; rules, then the LLM filter, then dedup. All rows stay."""
    cfg = params.load().questions
    rows = ql_rules(first_questions(raw_logs), cfg.ql_max_chars, cfg.ql_english_only, cfg.ql_min_turns)
    passed = rows.filter(pl.col("rule_reason").is_null())
    limit = cfg.ql_max_llm_checks
    todo = passed.head(limit) if limit else passed
    reqs = ql_filter_requests(todo)
    results = llm.chat("judge", reqs, context)
    judged = pl.concat([todo, parse_ql_filter(results, reqs)], how="horizontal")
    judged = judged.with_columns(reject_reason=llm_reason())
    skipped = passed.filter(~pl.col("question_id").is_in(todo["question_id"].to_list())).with_columns(
        status=pl.lit("skipped"), reject_reason=pl.lit("skipped"),
        error=pl.lit(f"over questions.ql_max_llm_checks={limit}"))
    ruled = rows.filter(pl.col("rule_reason").is_not_null()).with_columns(reject_reason=pl.col("rule_reason"))
    allrows = pl.concat([judged, skipped, ruled], how="diagonal_relaxed")
    out = apply_dedup(allrows, pl.col("reject_reason").is_null(), "question", embedder.encode, cfg.dedup_tau,
                      cfg.dedup_block)
    out = out.with_columns(source=pl.lit("log")).drop("rule_reason")
    context.add_output_metadata({
        **llm.usage("judge", results), "first_questions": out.height, "kept": int(out["kept"].sum()),
        **{f"rejected_{k}": v for k, v in _counts(out, "reject_reason").items()},
    })
    return out


@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"})
def personas(context: dg.AssetExecutionContext, params: ParamsResource) -> pl.DataFrame:
    """The persona pool (shipped list in questions.personas_path); `selected` marks the first n_personas."""
    cfg = params.load().questions
    df = load_personas(cfg.personas_path)
    out = df.with_row_index("rank").with_columns(
        selected=pl.col("rank") < cfg.n_personas, source=pl.lit(cfg.personas_path)).drop("rank")
    context.add_output_metadata({"personas": out.height, "selected": int(out["selected"].sum())})
    return out


@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"},
          ins={"seed_questions_ql": dg.AssetIn(key=[GROUP, "seed_questions_ql"]),
               "personas": dg.AssetIn(key=[GROUP, "personas"])})
def seed_questions_qg(context: dg.AssetExecutionContext, params: ParamsResource, llm: LLMResource,
                      embedder: EmbedderResource, seed_questions_ql: pl.DataFrame,
                      personas: pl.DataFrame) -> pl.DataFrame:
    """Q^G: persona -> topic -> question (ICL demos from Q^L + seed files), keep/enrich/simplify, dedup vs Q^L."""
    cfg = params.load().questions
    ql = seed_questions_ql.filter(pl.col("kept"))
    pool = ql["question"].to_list() + load_seed_questions(cfg.seed_files)
    split = cfg.transform_split
    plan = qg_plan(personas.filter(pl.col("selected")), cfg.n_personas, cfg.questions_per_persona, pool,
                   cfg.icl_demos, (split.keep, split.enrich, split.simplify), cfg.seed)
    reqs = qg_requests(plan, cfg.generation_temperature, cfg.seed)
    gen = llm.chat("generator", reqs, context)
    rows = parse_qg(plan, reqs, gen)
    todo = rows.filter((pl.col("status") == "ok") & (pl.col("transformation") != "keep"))
    treqs = transform_requests(todo)
    tres = llm.chat("generator", treqs, context)
    rows = apply_transforms(rows, todo["qg_id"].to_list(), treqs, tres)
    out = dedup_against(rows, ql, embedder.encode, cfg.dedup_tau, cfg.dedup_block)
    out = out.with_columns(question_id=pl.col("qg_id"), source=pl.lit("generated"))
    gen_usage = llm.usage("generator", gen + tres)
    context.add_output_metadata({
        **gen_usage, "generated": out.height, "kept": int(out["kept"].sum()),
        "demo_pool": len(pool),
        **{f"transform_{k}": v for k, v in _counts(out, "transformation").items()},
        **{f"rejected_{k}": v for k, v in _counts(out, "reject_reason").items()},
    })
    return out


@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"},
          ins={"seed_questions_ql": dg.AssetIn(key=[GROUP, "seed_questions_ql"]),
               "seed_questions_qg": dg.AssetIn(key=[GROUP, "seed_questions_qg"])})
def question_set(context: dg.AssetExecutionContext, params: ParamsResource, seed_questions_ql: pl.DataFrame,
                 seed_questions_qg: pl.DataFrame) -> pl.DataFrame:
    """Q = (Q^L, Q^G): every kept question; `selected` marks those sent on to CFD/OFS (questions.max_selected)."""
    out = select_questions(seed_questions_ql, seed_questions_qg, params.load().questions.max_selected)
    context.add_output_metadata({"questions": out.height, "selected": int(out["selected"].sum()),
                                 **{f"from_{k}": v for k, v in _counts(out, "question_source").items()}})
    return out
