"""Runs of `clarify materialize` carry their process identity as tags, so a run whose process was killed (it
stays STARTED in Dagster forever) can be found and marked failed the next time the CLI starts; and their
provenance (group, DVC stage, git commit, params hash), so the UI shows what produced each run."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import uuid
from pathlib import Path

import dagster as dg
import psutil
from pydantic import BaseModel

from dagster_project.io.writers import atomic_path

PID_TAG, HOST_TAG, STARTED_TAG = "clarify/pid", "clarify/host", "clarify/process_started"
UNFINISHED = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]


def process_tags() -> dict[str, str]:
    """Tags naming this process: pid, host, and the process' start time (a reused pid is another process)."""
    me = psutil.Process()
    return {PID_TAG: str(me.pid), HOST_TAG: socket.gethostname(), STARTED_TAG: f"{me.create_time():.2f}"}


# What `make install` and `clarify materialize` put in a new (or empty) $DAGSTER_HOME/dagster.yaml: like DVC's
# and GX's analytics (DVC_NO_ANALYTICS, GX_ANALYTICS_ENABLED), Dagster's telemetry stays off.
DAGSTER_YAML = "telemetry:\n  enabled: false\n"


def ensure_dagster_yaml(home: str | Path) -> Path:
    """<home>/dagster.yaml with DAGSTER_YAML when it is missing or empty; a file with content is the user's and
    is left as it is. Returns its path."""
    path = Path(home) / "dagster.yaml"
    if not path.exists() or not path.read_text(encoding="utf-8").strip():
        with atomic_path(path, ".yaml") as tmp:
            tmp.write_text(DAGSTER_YAML, encoding="utf-8")
    return path


GROUP_TAG, STAGE_TAG, EXP_TAG = "clarify/group", "clarify/dvc_stage", "clarify/dvc_exp"
COMMIT_TAG, DIRTY_TAG, PARAMS_TAG = "clarify/git_commit", "clarify/git_dirty", "clarify/params_hash"


def _git(args: list[str], cwd: Path) -> str | None:
    """stdout of one git command, or None outside a git work tree / without git."""
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def git_tags(cwd: str | Path = ".") -> dict[str, str]:
    """Short commit and whether tracked files differ from it; {} outside git. dvc.lock is not counted: `dvc
    repro` rewrites it after each stage, so every later stage would otherwise look dirty."""
    commit = _git(["rev-parse", "--short", "HEAD"], Path(cwd))
    if not commit:
        return {}
    status = _git(["status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)dvc.lock"], Path(cwd))
    return {COMMIT_TAG: commit, DIRTY_TAG: "unknown" if status is None else str(bool(status)).lower()}


def params_hash(params: BaseModel) -> str:
    """sha256 (12 hex) of the resolved, validated params (defaults filled in), as canonical JSON."""
    return hashlib.sha256(params.model_dump_json().encode()).hexdigest()[:12]


def provenance_tags(group: str, params: BaseModel, cwd: str | Path = ".") -> dict[str, str]:
    """Run tags naming what produced a `clarify materialize` run: group, DVC stage and experiment (when DVC
    runs it: $DVC_STAGE, $DVC_EXP_NAME), git commit + dirty flag, params hash."""
    tags = {GROUP_TAG: group, PARAMS_TAG: params_hash(params), **git_tags(cwd)}
    for tag, var in ((STAGE_TAG, "DVC_STAGE"), (EXP_TAG, "DVC_EXP_NAME")):
        if os.environ.get(var):
            tags[tag] = os.environ[var]
    return tags


INVOCATION_TAG, INVOCATION_STARTED_TAG = "clarify/invocation", "clarify/invocation_started"


def invocation_tags() -> dict[str, str]:
    """Tags shared by every run of one `clarify materialize` (worker processes included): an id, and the start
    time of the command's process, so `clarify timings` can tell a stage's wall time, start-up included."""
    return {INVOCATION_TAG: uuid.uuid4().hex, INVOCATION_STARTED_TAG: f"{psutil.Process().create_time():.2f}"}


def _alive(tags: dict[str, str]) -> bool:
    try:
        proc = psutil.Process(int(tags[PID_TAG]))
        return f"{proc.create_time():.2f}" == tags[STARTED_TAG] and proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied, KeyError, ValueError):
        return False


def sweep_orphaned_runs(instance: dg.DagsterInstance) -> list[str]:
    """Mark failed every unfinished run started on this host by a process that no longer exists; returns their
    ids. Runs without our tags (launched from the UI) or from another host are left to Dagster."""
    runs = instance.get_runs(filters=dg.RunsFilter(statuses=UNFINISHED, tags={HOST_TAG: socket.gethostname()}))
    orphans = [run for run in runs if not _alive(run.tags)]
    for run in orphans:
        instance.report_run_failed(run, message=f"orphaned: process {run.tags.get(PID_TAG)} that ran it is gone "
                                                "(killed?); marked failed by the next `clarify materialize`")
    return [run.run_id for run in orphans]
