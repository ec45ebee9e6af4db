"""Runs of `clarify materialize` carry their process identity as tags, so a run whose process was killed (it
stays STARTED in Dagster forever) can be found and marked failed the next time the CLI starts."""

from __future__ import annotations

import socket

import dagster as dg
import psutil

PID_TAG, HOST_TAG, STARTED_TAG = "clarify/pid", "clarify/host", "clarify/process_started"
UNFINISHED = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]


def process_tags() -> dict[str, str]:
    """Tags naming this process: pid, host, and the process' start time (a reused pid is another process)."""
    me = psutil.Process()
    return {PID_TAG: str(me.pid), HOST_TAG: socket.gethostname(), STARTED_TAG: f"{me.create_time():.2f}"}


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
