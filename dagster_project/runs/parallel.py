"""Runs out of this process: partitions in parallel processes, steps in Dagster's multiprocess executor or on a
Dask cluster (dagster-dask), all sharing the LLM cache (SQLite WAL; claims keep two runs from paying for one call)
and the DuckDB warehouse (a view update waits while another process writes it).

One Dagster run materializes one partition key, and an executor only parallelizes the steps of one run, so
partitions run in parallel as concurrent runs, each orchestrated by a worker process of a pool (as Dagster's own
run launcher gives each run a process; two runs in threads of one process deadlock in Dagster's logging set-up).
A stage without partitions is one run whose independent steps the executor runs side by side. Every process
rebuilds the definitions from the same params file, and relative paths (assets/, the cache) resolve from the
working directory: a Dask worker must start in the project folder on a filesystem every machine shares.
"""

from __future__ import annotations

import functools
import hashlib
import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from dagster_project.runs.instance import process_tags

# imported once by the fork server (Python's: one per process); every worker and step process is a fork of it,
# so none pays the ~5 s CPU of importing the project again
PRELOAD = ["dagster_project.definitions"]


@dataclass(frozen=True)
class Execution:
    """Up to `processes` partition runs at once (and steps at once in a run without partitions), every process
    building the definitions from `params` (an absolute path); with `dask_address`, every step on that cluster."""

    processes: int
    params: str
    dask_address: str | None = None

    def __post_init__(self) -> None:
        if self.processes < 1:
            raise ValueError(f"processes must be >= 1, got {self.processes}")
        if not Path(self.params).is_absolute():
            raise ValueError(f"params must be an absolute path (every process reads it), got {self.params!r}")

    def executor_for(self, partitioned: bool) -> str:
        """A partition run is already a process of its own: without Dask its one step runs in it."""
        return "dask" if self.dask_address else "in_process" if partitioned else "multiprocess"

    def run_config(self, partitioned: bool) -> dict[str, Any]:
        """A run's `execution` config (what the Launchpad takes too)."""
        executor = self.executor_for(partitioned)
        if executor == "dask":
            return {"execution": {"config": {"cluster": {"existing": {"address": self.dask_address}}}}}
        if executor == "multiprocess":
            return {"execution": {"config": {
                "max_concurrent": self.processes, "start_method": {"forkserver": {"preload_modules": PRELOAD}}}}}
        return {}

    def job(self, keys: Sequence[dg.AssetKey], partition: str | None) -> dg.ReconstructableJob:
        """A job of ``keys`` as a pointer another process (or machine) rebuilds: stage_job(params, keys, executor,
        label). A partition's job has a name of its own: dagster-dask names a step's Dask task after job and step,
        and Dask would run two concurrent partitions' tasks of one name once."""
        label = hashlib.sha1(partition.encode()).hexdigest()[:12] if partition is not None else ""
        return dg.build_reconstructable_job(__name__, stage_job.__name__, reconstructable_args=(
            self.params, tuple(k.to_user_string() for k in keys), self.executor_for(partition is not None), label))


@functools.cache
def stage_job(params: str, keys: tuple[str, ...], executor: str, label: str = "") -> dg.JobDefinition:
    """A job of the assets ``keys`` (one stage: one partitions definition) built from ``params``, run by
    ``executor``, named clarify_<executor>[_<label>]. Module scope: Dagster calls it again in every step process
    and on every Dask worker, so all of them run the same code."""
    name = f"clarify_{executor}{f'_{label}' if label else ''}"
    job = dg.define_asset_job(name, selection=[dg.AssetKey.from_user_string(k) for k in keys],
                              executor_def=_executor_def(executor))
    return dg.Definitions.merge(_definitions(params), dg.Definitions(jobs=[job])).resolve_job_def(name)


@functools.cache
def _definitions(params: str) -> dg.Definitions:
    from dagster_project.config import load_params
    from dagster_project.definitions import build_definitions

    return build_definitions(load_params(params))


def _executor_def(name: str) -> dg.ExecutorDefinition:
    if name == "dask":
        from dagster_dask import dask_executor  # only a Dask run needs the package

        return dask_executor
    return dg.multiprocess_executor if name == "multiprocess" else dg.in_process_executor


@dataclass(frozen=True)
class RunOutcome:
    """What the caller needs of a run executed in another process."""

    run_id: str
    partition: str | None
    success: bool


def _execute(execution: Execution, keys: Sequence[dg.AssetKey], partition: str | None, tags: dict[str, str],
             instance_ref: Any, env: dict[str, str] | None = None) -> RunOutcome:
    """One run in this process, recorded in the caller's instance; a worker first takes the caller's environment
    (a fork server's is the one it started with)."""
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    with dg.DagsterInstance.from_ref(instance_ref) as instance:
        result = dg.execute_job(execution.job(keys, partition), instance, tags={**process_tags(), **tags},
                                run_config=execution.run_config(partition is not None))
        return RunOutcome(result.run_id, partition, result.success)


def run_stage(execution: Execution, keys: Sequence[dg.AssetKey], pdef: dg.PartitionsDefinition | None,
              partitions: Sequence[str | None], instance: dg.DagsterInstance,
              say: Callable[[str], None] = lambda m: None, tags: dict[str, str] | None = None) -> list[RunOutcome]:
    """One run of ``keys`` per partition key of ``pdef`` (None: a stage without partitions, one run here), up to
    execution.processes at once in worker processes, each tagged with ``tags`` (provenance) too; outcomes in the
    order of ``partitions``. A failed run stops no other."""
    tags = tags or {}
    names = ", ".join(k.to_user_string() for k in keys)
    t0 = time.monotonic()

    def told(out: RunOutcome) -> RunOutcome:
        say(f"{names}{f' [{out.partition}]' if out.partition else ''}: {'ok' if out.success else 'FAILED'} "
            f"({time.monotonic() - t0:.1f}s into the stage, {execution.executor_for(out.partition is not None)})")
        return out

    if pdef is None or partitions == [None]:
        return [told(_execute(execution, keys, None, tags, instance.get_ref()))]
    # workers fork from the fork server that imported the project once; each starts in this working directory
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    with ProcessPoolExecutor(max_workers=min(execution.processes, len(partitions)), mp_context=context) as pool:
        futures = [pool.submit(_execute, execution, keys, str(pk), {**tags, **pdef.get_tags_for_partition_key(pk)},
                               instance.get_ref(), dict(os.environ)) for pk in partitions]
        try:
            for done in as_completed(futures):  # told as each ends
                told(done.result())
            return [f.result() for f in futures]
        except BaseException:  # Ctrl-C or a broken worker: start no further runs
            for f in futures:
                f.cancel()
            raise
