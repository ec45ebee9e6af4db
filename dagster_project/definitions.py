"""The one Definitions object: assets, asset checks, resources and jobs of clarify-pipeline."""

from __future__ import annotations

import dagster as dg

from dagster_project import defs as defs_package
from dagster_project.defs.checks import build_checks
from dagster_project.defs.logs import logs_daily_job, logs_daily_schedule
from dagster_project.resources.embedder import EmbedderResource
from dagster_project.resources.llm import LLMResource
from dagster_project.resources.params import ParamsResource, default_params_path
from dagster_project.resources.warehouse import WarehouseIOManager

_params = default_params_path()

defs = dg.Definitions(
    # every asset in dagster_project/defs/*.py (one module per group)
    assets=dg.load_assets_from_package_module(defs_package),
    asset_checks=build_checks(),
    jobs=[logs_daily_job],
    schedules=[logs_daily_schedule],
    resources={
        "io_manager": WarehouseIOManager(),
        "params": ParamsResource(path=_params),
        "llm": LLMResource(params_path=_params),
        "embedder": EmbedderResource(),
    },
    # One process: the embedded model is loaded once per run, not once per step.
    executor=dg.in_process_executor,
)
