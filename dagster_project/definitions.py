"""The one Definitions object. params.yaml is loaded and validated once, here, and every resource and
params-shaped part of the graph (partitions, method lists) is built from that one value."""

from __future__ import annotations

import dagster as dg

from dagster_project.config import Params, definition_params
from dagster_project.defs.annotations import assets as annotations
from dagster_project.defs.benchmark import assets as benchmark
from dagster_project.defs.double_turn import assets as double_turn
from dagster_project.defs.evaluation import assets as evaluation
from dagster_project.defs.facets import assets as facets
from dagster_project.defs.intents import assets as intents
from dagster_project.defs.logs import assets as logs
from dagster_project.defs.logs.automation import with_refresh
from dagster_project.defs.quality.checks import build_checks
from dagster_project.defs.questions import assets as questions
from dagster_project.defs.retrieval import assets as retrieval
from dagster_project.defs.training import assets as training
from dagster_project.lib.code_version import with_code_versions
from dagster_project.lib.resources import EmbedderResource, LLMResource
from dagster_project.lib.warehouse import WarehouseIOManager


def build_definitions(params: Params, llm: LLMResource | None = None,
                      embedder: dg.ConfigurableResource | None = None) -> dg.Definitions:
    """Every group's assets (each with a code_version from its code and prompts), the GX checks, and the
    resources built from `params` (tests pass fakes)."""
    log_defs = logs.build(params)
    clarilm, refresh = with_refresh(
        [*dg.load_assets_from_modules([questions, facets, annotations]), *(log_defs.assets or [])], logs.GROUP,
        params.logs.sensor_interval_s)
    graph = with_code_versions(dg.Definitions.merge(
        dg.Definitions(assets=[*clarilm, *dg.load_assets_from_modules([benchmark, double_turn, intents, retrieval])],
                       sensors=[refresh] if refresh else []),
        dg.Definitions(jobs=log_defs.jobs, sensors=log_defs.sensors),
        evaluation.build(params),
        training.build(params),
    ))
    keys = {k for a in graph.assets or [] for k in a.keys}
    return dg.Definitions.merge(graph, dg.Definitions(
        asset_checks=build_checks(keys),
        resources={
            "io_manager": WarehouseIOManager(),
            "params": params,
            "llm": llm or LLMResource(params.llm),
            "embedder": embedder or EmbedderResource(model=params.embedder.model,
                                                     batch_size=params.embedder.batch_size,
                                                     cache_path=params.embedder.cache_path),
        },
        # One process: the embedded model is loaded once per run, not once per step.
        executor=dg.in_process_executor,
    ))


defs = build_definitions(definition_params())
