"""params.yaml as a Dagster resource: validated once per run, with errors that name the bad key."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from dagster_project.core.config import Params, load_params


def default_params_path() -> str:
    return os.environ.get("CLARIFY_PARAMS", "params.yaml")


def definition_params() -> Params:
    """params.yaml as seen when the code location loads: partitions are fixed per load (reload to change)."""
    path = Path(default_params_path())
    return load_params(path) if path.exists() else Params()


class ParamsResource(dg.ConfigurableResource):
    path: str = "params.yaml"

    def load(self) -> Params:
        return load_params(self.path)
