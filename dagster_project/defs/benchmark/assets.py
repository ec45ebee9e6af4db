"""Group `benchmark`: ClarifyMT-Bench construction (taxonomy -> single-turn queries -> review sheet /
validation -> persona dialogues)."""

from pathlib import Path

import dagster as dg
import polars as pl

from dagster_project.config import Params
from dagster_project.core.clarifymt import benchmark, simulation, validation
from dagster_project.core.shared.taxonomy import PERSONAS, taxonomy_table
from dagster_project.io.records import InputFileError
from dagster_project.io.writers import atomic_path
from dagster_project.lib.assets import group_asset, upstream
from dagster_project.lib.resources import EmbedderResource, LLMResource
from dagster_project.lib.warehouse import ASSETS_DIR
from dagster_project.llm.task import Status

GROUP = "benchmark"
asset = group_asset(GROUP)
SHEET_FILE = Path(ASSETS_DIR) / GROUP / "review_sheet.csv"


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
def review_sheet(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                 single_turn_queries: pl.DataFrame) -> pl.DataFrame:
    """A seeded sample (benchmark.validation.sheet_fraction; paper: 10%) of the kept pairs for two annotators,
    also written as assets/benchmark/review_sheet.csv: fill keep_1 / keep_2 (keep or remove) and optionally
    rating_1 / rating_2 (1-5), then point benchmark.annotations_path at the filled file."""
    cfg = params.benchmark.validation
    out = validation.review_sheet(single_turn_queries, cfg.sheet_fraction, cfg.sheet_seed)
    with atomic_path(SHEET_FILE, ".csv") as tmp:
        out.write_csv(tmp)
    context.add_output_metadata({"rows": out.height, "file": dg.MetadataValue.path(str(SHEET_FILE))})
    return out


@dg.multi_asset(
    group_name=GROUP, can_subset=False, ins=upstream("benchmark/single_turn_queries"),
    outs={"validated_queries": dg.AssetOut(key=[GROUP, "validated_queries"], kinds={"polars"}),
          "annotation_agreement": dg.AssetOut(key=[GROUP, "annotation_agreement"], kinds={"polars"})},
)
def validated_queries(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                      llm: dg.ResourceParam[LLMResource], single_turn_queries: pl.DataFrame):
    """Manual validation (§4.2): a filled review sheet (benchmark.annotations_path) decides its rows and gives
    Cohen's kappa and judge-vs-human Pearson r; every other kept row goes through the automatic filter
    (prompt echo, judge rating < min_quality, LLM subtype check). All rows stay, with `valid`, `removed_by`
    and `validation_path`; `annotation_agreement` is the one-row summary the report reads."""
    cfg = params.benchmark
    sheet = None
    if cfg.annotations_path:
        try:
            sheet = validation.read_sheet(cfg.annotations_path)
        except InputFileError as err:
            raise dg.Failure(description=str(err)) from None
    chat = llm.session(context)
    out, summary = validation.validate(chat, single_turn_queries, cfg.validation, sheet)
    table = validation.agreement_table(summary, cfg.annotations_path)
    said = {k: v for k, v in table.row(0, named=True).items() if k in ("path", "labels") and v is not None}
    if said.get("labels") == validation.ILLUSTRATIVE:
        context.log.warning(f"benchmark.annotations_path is the shipped example sheet: {validation.ILLUSTRATIVE}")
    context.add_output_metadata({**chat.usage(), **{k: v for k, v in summary.items() if v is not None}, **said},
                                output_name="validated_queries")
    context.add_output_metadata({**{k: v for k, v in summary.items() if v is not None}, **said},
                                output_name="annotation_agreement")
    return out, table


@asset(ins=upstream("benchmark/validated_queries"))
def persona_dialogues(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                      llm: dg.ResourceParam[LLMResource], validated_queries: pl.DataFrame) -> pl.DataFrame:
    """Each kept and valid query x 6 personas, one row per evaluated turn with the reference action (§4.2)."""
    cfg = params.benchmark
    personas = [x for x in PERSONAS if cfg.personas is None or x.key in cfg.personas]
    valid = validated_queries.filter(pl.col("valid"))
    if valid.is_empty():
        raise dg.Failure(description="no valid query to simulate: every one was removed by validation "
                                     "(see benchmark/annotation_agreement and validated_queries.removed_by)")
    chat = llm.session(context)
    out = simulation.simulate(chat, valid, personas,
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
