"""Group `benchmark`: ClarifyMT-Bench construction (taxonomy -> single-turn queries -> persona dialogues)."""


import dagster as dg
import polars as pl

from dagster_project.core.clarifymt.benchmark import generation_plan, generation_requests, parse_generation, parse_ratings, \
    rating_requests
from dagster_project.core.shared.dedup import semantic_dedup
from dagster_project.core.clarifymt.simulation import assemble_dialogues, simulation_requests
from dagster_project.core.shared.taxonomy import PERSONA_BY_KEY, PERSONAS, QUERY_SUBTYPES, SUBTYPE_BY_KEY, taxonomy_table
from dagster_project.lib.embedder import EmbedderResource
from dagster_project.llm.client import LLMResource
from dagster_project.resources.params import ParamsResource

GROUP = "benchmark"


@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"})
def taxonomy() -> pl.DataFrame:
    """The 16 ambiguity subtypes in 5 dimensions (12 query subtypes + 4 interactional), from core/taxonomy.py."""
    return taxonomy_table()


@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"}, deps=[taxonomy])
def single_turn_queries(context: dg.AssetExecutionContext, params: ParamsResource, llm: LLMResource,
                        embedder: EmbedderResource) -> pl.DataFrame:
    """n ambiguous queries per subtype (generator), quality-rated (judge), MiniLM-deduplicated at tau.

    Every generated row stays: `kept` is true for the representatives; others carry `dedup_reason`
    (exact / semantic) and `duplicate_of`, or a non-ok `status` when the reply could not be used.
    """
    p = params.load()
    cfg = p.benchmark
    subtypes = [s for s in QUERY_SUBTYPES if cfg.subtypes is None or s.key in cfg.subtypes]
    plan = generation_plan(subtypes, cfg.n_per_subtype)
    reqs = generation_requests(plan, SUBTYPE_BY_KEY, cfg.generation_temperature, p.llm.role("generator").seed)
    gen = llm.chat("generator", reqs, context)
    rows = parse_generation(plan, reqs, gen)
    ok = rows.filter(pl.col("status") == "ok")
    ratings = llm.chat("judge", rating_requests(ok, SUBTYPE_BY_KEY), context)
    rated = pl.concat([ok, parse_ratings(ratings)], how="horizontal")
    dd = semantic_dedup(rated["query"].to_list(), rated["quality"].fill_null(0).to_list(), embedder.encode,
                        cfg.dedup_tau, cfg.dedup_block)
    ids = rated["query_id"]
    rated = rated.with_columns(
        kept=dd.table["kept"], dedup_reason=dd.table["dedup_reason"], similarity=dd.table["similarity"],
        duplicate_of=pl.Series([ids[d] if d >= 0 else None for d in dd.table["duplicate_of"]], dtype=pl.Utf8),
    )
    out = pl.concat([rated, rows.filter(pl.col("status") != "ok").with_columns(kept=pl.lit(False))],
                    how="diagonal_relaxed")
    out = out.with_columns(source=pl.lit("generated")).sort("query_id")
    context.add_output_metadata({
        **{f"generator_{k}": v for k, v in llm.usage("generator", gen).items()},
        **{f"judge_{k}": v for k, v in llm.usage("judge", ratings).items()},
        **dd.summary(),
        "parse_errors": rows.height - ok.height,
        "kept": int(out["kept"].sum()),
    })
    return out


@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"},
          ins={"single_turn_queries": dg.AssetIn(key=[GROUP, "single_turn_queries"])})
def persona_dialogues(context: dg.AssetExecutionContext, params: ParamsResource, llm: LLMResource,
                      single_turn_queries: pl.DataFrame) -> pl.DataFrame:
    """Each kept query x 6 personas, one row per evaluated turn with the reference action (paper §4.2)."""
    p = params.load()
    cfg = p.benchmark
    personas = [x for x in PERSONAS if cfg.personas is None or x.key in cfg.personas]
    queries = single_turn_queries.filter(pl.col("kept"))
    plan, reqs = simulation_requests(queries, personas, cfg.simulation_temperature,
                                     p.llm.role("user_simulator").seed)
    results = llm.chat("user_simulator", reqs, context)
    out = assemble_dialogues(queries, plan, reqs, results, PERSONA_BY_KEY).with_columns(source=pl.lit("simulated"))
    dialogues = out.filter(pl.col("turn") == 1)
    context.add_output_metadata({
        **llm.usage("user_simulator", results),
        "dialogues": dialogues.height,
        "turns": out.height,
        "avg_turns": round(out.height / max(dialogues.height, 1), 2),
        "failed_simulations": out.filter((pl.col("turn") == 2) & (pl.col("status") != "ok")).height,
    })
    return out
