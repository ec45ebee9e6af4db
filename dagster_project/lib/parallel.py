"""Partitions in parallel: up to N partition runs at once, each run's steps out of this process, in a process of
their own (Dagster's multiprocess executor) or on a Dask worker (dagster-dask: any machine of a Dask cluster).

One Dagster run materializes one partition key, so partitions run in parallel as concurrent runs: this process
only orchestrates them (one thread per run, waiting on its step). The runs share the LLM cache (SQLite WAL; claims
keep two runs from paying for one call) and the DuckDB warehouse (a view update waits while another process
writes it). Every process rebuilds the definitions from the same params file, and relative paths (assets/, the
cache) are resolved from the working directory, so a Dask worker must start in the project folder on a shared
filesystem.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import dagster as dg

from dagster_project.lib.runs import process_tags

ExecutorName = Literal["in_process", "multiprocess", "dask"]
EXECUTORS: tuple[ExecutorName, ...] = ("in_process", "multiprocess", "dask")
# imported once by the multiprocess executor's fork server; each step process is a fork of it (no ~5 s import)
PRELOAD = ["dagster_project.definitions"]


@dataclass(frozen=True)
class Execution:
    """Where a group's runs execute: `executor` for each run's steps, up to `processes` partition runs at once,
    every process building the definitions from `params` (an absolute path); `dask_address`: the scheduler."""

    executor: ExecutorName
    processes: int
    params: str
    dask_address: str | None = None

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise ValueError(f"executor {self.executor!r} is not one of {list(EXECUTORS)}")
        if self.processes < 1:
            raise ValueError(f"processes must be >= 1, got {self.processes}")
        if self.executor == "in_process" and self.processes > 1:
            raise ValueError("in_process runs one partition at a time: use the multiprocess or dask executor "
                             "for processes > 1")
        if (self.executor == "dask") != bool(self.dask_address):
            raise ValueError("the dask executor needs a scheduler address (e.g. tcp://10.0.0.5:8786), "
                             "and only the dask executor takes one")

    def run_config(self) -> dict[str, Any]:
        """The `execution` run config of each run (what the Launchpad takes too)."""
        if self.executor == "multiprocess":
            return {"execution": {"config": {"max_concurrent": self.processes,
                                             "start_method": {"forkserver": {"preload_modules": PRELOAD}}}}}
        if self.executor == "dask":
            return {"execution": {"config": {"cluster": {"existing": {"address": self.dask_address}}}}}
        return {}

    def job(self) -> dg.ReconstructableJob:
        """The global asset job as a pointer that another process (or machine) rebuilds: partition_job(params, executor)."""
        return dg.build_reconstructable_job(__name__, partition_job.__name__,
                                            reconstructable_args=(self.params, self.executor),
                                            reconstructor_working_directory=str(Path.cwd()))


@functools.cache
def partition_job(params: str, executor: ExecutorName) -> dg.JobDefinition:
    """The project's global asset job built from `params`, with `executor` (module scope: Dagster calls this again
    in every step process and on every Dask worker, so all of them run the same definitions)."""
    from dagster_project.config import load_params
    from dagster_project.definitions import build_definitions

    job = build_definitions(load_params(params)).resolve_implicit_global_asset_job_def()
    return job.with_executor_def(_executor_def(executor))


def _executor_def(name: ExecutorName) -> dg.ExecutorDefinition:
    if name == "dask":
        from dagster_dask import dask_executor  # optional: only a Dask run needs it

        return dask_executor
    return dg.multiprocess_executor if name == "multiprocess" else dg.in_process_executor


def run_stage(execution: Execution, keys: Sequence[dg.AssetKey], pdef: dg.PartitionsDefinition | None,
              partitions: Sequence[str | None], instance: dg.DagsterInstance,
              say: Callable[[str], None] = lambda m: None) -> list[dg.ExecutionResult]:
    """One run of ``keys`` per partition key of ``pdef`` (None: an unpartitioned stage, one run), up to
    execution.processes at once; the results in the order of ``partitions``. A failed run stops no other."""
    job, names = execution.job(), ", ".join(k.to_user_string() for k in keys)

    def run(pk: str | None) -> dg.ExecutionResult:
        t0 = time.monotonic()
        tags = {**process_tags(), **(pdef.get_tags_for_partition_key(pk) if pk is not None and pdef else {})}
        result = dg.execute_job(job, instance, run_config=execution.run_config(), tags=tags,
                                asset_selection=list(keys))
        say(f"{names}{f' [{pk}]' if pk else ''}: {'ok' if result.success else 'FAILED'} "
            f"({time.monotonic() - t0:.1f}s, {execution.executor})")
        return result

    with ThreadPoolExecutor(max_workers=min(execution.processes, len(partitions)),
                            thread_name_prefix="partition-run") as pool:
        futures = [pool.submit(run, pk) for pk in partitions]
        try:
            return [f.result() for f in futures]
        except BaseException:  # Ctrl-C: start no further runs (the step processes get the signal themselves)
            for f in futures:
                f.cancel()
            raise
