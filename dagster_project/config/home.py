"""Where run state lives (LLM cache, Dagster run history): one folder that DVC experiment workspaces share."""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "CLARIFY_HOME"


def clarify_home() -> Path:
    """$CLARIFY_HOME; else $DVC_ROOT, which DVC sets for every stage command to the project's root, also in the
    temporary copies of `dvc exp run --temp` / `--queue`; else the working directory (the repo root)."""
    for var in (HOME_ENV, "DVC_ROOT"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser().resolve()
    return Path.cwd()


def home_path(path: str | Path) -> Path:
    """An absolute path as is; a relative one below clarify_home() (not the working directory)."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else clarify_home() / p


def dagster_home() -> Path:
    """$DAGSTER_HOME when set (Dagster's own convention), else <clarify_home>/.dagster."""
    return home_path(os.environ.get("DAGSTER_HOME") or ".dagster").resolve()


MODELS_ENV = "CLARIFY_MODELS"
DEFAULT_MODELS = "~/.cache/clarify-pipeline/models"


def models_dir() -> Path:
    """Model files `make install` extracts (the embedded GGUF): $CLARIFY_MODELS, else ~/.cache/clarify-pipeline/models,
    outside any checkout like the wheel cache, so clones, test folders and DVC temp workspaces find the same file."""
    return Path(os.environ.get(MODELS_ENV) or DEFAULT_MODELS).expanduser()
