"""Group `benchmark`: ClarifyMT-Bench construction (taxonomy -> single-turn queries -> persona dialogues)."""

import dagster as dg
import polars as pl

from dagster_project.config import Params
from dagster_project.core.clarifymt import benchmark, simulation
from dagster_project.core.shared.taxonomy import PERSONAS, taxonomy_table
from dagster_project.lib.assets import group_asset, upstream
from dagster_project.lib.resources import EmbedderResource, LLMResource
from dagster_project.llm.task import Status

asset = group_asset("benchmark")


@asset
def taxonomy() -> pl.DataFrame:
    """The 16 ambiguity subtypes in 5 dimensions (12 query subtypes + 4 interactional), from core/taxonomy.py."""
    return taxonomy_table()


@asset(deps=[taxonomy])
def single_turn_queries(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                        llm: dg.ResourceParam[LLMResource], embedder: EmbedderResource) -> pl.DataFrame:
    """n ambiguous queries per subtype (generator), quality-rated (judge), MiniLM-deduplicated at tau.

    Every generated row stays: `kept` is true for the representatives; others carry `dedup_reason`
    (exact / semantic) and `duplicate_of`, or a non-ok `status` when the reply could not be used.
    """
    chat = llm.session(context)
    out, dedup = benchmark.single_turn_queries(chat, params.benchmark, embedder.encode,
                                               params.llm.role("generator").seed)
    failed = int((out["status"] != Status.OK.value).sum())
    context.add_output_metadata({**chat.usage(), **dedup, "parse_errors": failed, "kept": int(out["kept"].sum())})
    return out


@asset(ins=upstream("benchmark/single_turn_queries"))
def persona_dialogues(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                      llm: dg.ResourceParam[LLMResource], single_turn_queries: pl.DataFrame) -> pl.DataFrame:
    """Each kept query x 6 personas, one row per evaluated turn with the reference action (paper §4.2)."""
    cfg = params.benchmark
    personas = [x for x in PERSONAS if cfg.personas is None or x.key in cfg.personas]
    chat = llm.session(context)
    out = simulation.simulate(chat, single_turn_queries.filter(pl.col("kept")), personas,
                              cfg.simulation_temperature, params.llm.role("user_simulator").seed)
    out = out.with_columns(source=pl.lit("simulated"))
    dialogues = out.filter(pl.col("turn") == 1)
    context.add_output_metadata({
        **chat.usage(),
        "dialogues": dialogues.height,
        "turns": out.height,
        "avg_turns": round(out.height / max(dialogues.height, 1), 2),
        "failed_simulations": out.filter((pl.col("turn") == 2) & (pl.col("status") != Status.OK.value)).height,
    })
    return out
