"""`clarify plan`: a group run in a scratch copy of the project with a planning LLM (nothing sent, nothing of the
project written), for the calls, tokens and cost a real run would spend."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from dagster_project.config import load_params
from dagster_project.runs.group_runs import materialize_group


def _plan_workdir(root: Path, work: Path) -> None:
    """A scratch copy of the project folder: every entry linked, except assets/ whose Parquet files are linked
    one by one (writes replace the links, never the targets) and whose DuckDB file is copied."""
    import shutil

    for entry in root.iterdir():
        if entry.name not in ("assets", ".dagster", ".git"):
            (work / entry.name).symlink_to(entry)
    if (root / "assets").is_dir():
        def link_or_copy(src: str, dst: str) -> None:
            if src.endswith(".parquet"):
                os.symlink(os.path.abspath(src), dst)
            else:
                shutil.copy2(src, dst)

        shutil.copytree(root / "assets", work / "assets", copy_function=link_or_copy)


def plan_group(group: str, params: str, partition: list[str] | None = None,
               say: Callable[[str], None] = print) -> tuple[list, bool]:
    """Run a group's assets in a scratch folder with the LLM client's dry-run hook: (role plans, all assets ran)."""
    import tempfile

    import dagster as dg

    from dagster_project.definitions import build_definitions
    from dagster_project.lib.resources import LLMResource
    from dagster_project.llm.plan import Planner

    root = Path.cwd()
    p = load_params(params)
    planner = Planner()
    dry = build_definitions(p, llm=LLMResource(p.llm, dry_run=planner))
    with tempfile.TemporaryDirectory(prefix="clarify-plan-") as d:
        _plan_workdir(root, Path(d))
        os.chdir(d)
        try:
            with dg.DagsterInstance.ephemeral() as instance:
                results = materialize_group(dry, group, instance, partition, say=say)
        finally:
            os.chdir(root)
    return planner.summary(), bool(results) and all(r.success for r in results)
