"""The one Definitions object. params.yaml is loaded and validated once, here, and every resource and
params-shaped part of the graph (partitions, method lists) is built from that one value. The groups come from the
registry (defs/registry.py): each builds its own definitions from the params."""

from __future__ import annotations

import dagster as dg

from dagster_project.config import Params, definition_params
from dagster_project.defs.logs.automation import with_refresh
from dagster_project.defs.quality.checks import build_checks
from dagster_project.defs.registry import GROUPS
from dagster_project.lib.code_version import with_code_versions
from dagster_project.lib.resources import EmbedderResource, LLMResource
from dagster_project.lib.io_manager import WarehouseIOManager

LOGS_GROUP = "logs"


def group_definitions(params: Params) -> dg.Definitions:
    """Every registered group's definitions; groups flagged refresh_after_logs get the ClariLM refresh sensor over
    their assets that read the logs."""
    built = {g.name: g.build(params) for g in GROUPS}
    linked = {g.name for g in GROUPS if g.refresh_after_logs}
    follow = [a for name in (LOGS_GROUP, *linked) if name in built for a in built[name].assets or []]
    follow, refresh = with_refresh(follow, LOGS_GROUP, params.logs.sensor_interval_s) if linked else (follow, None)
    parts = [dg.Definitions(assets=follow, sensors=[refresh] if refresh else [])]
    for name, d in built.items():
        own = [] if name in linked or name == LOGS_GROUP else list(d.assets or [])
        parts.append(dg.Definitions(assets=own, asset_checks=d.asset_checks, jobs=d.jobs, sensors=d.sensors,
                                    schedules=d.schedules))
    return dg.Definitions.merge(*parts)


def build_definitions(params: Params, llm: LLMResource | None = None,
                      embedder: dg.ConfigurableResource | None = None) -> dg.Definitions:
    """Every group's assets (each with a code_version from its code and prompts), the GX checks, and the
    resources built from `params` (tests pass fakes)."""
    graph = with_code_versions(group_definitions(params))
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
