"""Run one asset group the way `clarify materialize` does: its stages in dependency order, one run per partition key
(or per key range under a single-run backfill policy), in this process or in parallel (runs/parallel.py)."""

from __future__ import annotations

import time

from dagster_project.lib.warehouse import remove_leftover_temp_files
from dagster_project.runs.parallel import Execution, run_stage
from dagster_project.runs.instance import process_tags


def group_stages(defs, group: str) -> list[tuple[object, list]]:
    """The group's assets in dependency order, cut into stages of one partitions definition each."""
    graph = defs.resolve_asset_graph()
    stages: list[tuple[object, list]] = []
    for key in graph.toposorted_asset_keys:
        node = graph.get(key)
        if node.group_name != group or not node.is_materializable:
            continue
        pdef = node.partitions_def
        if stages and stages[-1][0] == pdef:
            stages[-1][1].append(key)
        else:
            stages.append((pdef, [key]))
    return stages


LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def _stage_runs(graph, pdef, keys: list, partitions: list[str] | None, instance) -> list[tuple[str | None, dict]]:
    """(partition key, run tags) per run of one stage: one run per key, or, when every asset of the stage has a
    single-run backfill policy, one run per consecutive range of keys (each run reads its inputs once)."""
    from dagster_project.defs.logs.partitions import key_ranges, range_tags

    if pdef is None:
        return [(None, {})]
    order = pdef.get_partition_keys(dynamic_partitions_store=instance)
    wanted = order
    if partitions:
        unknown = sorted(set(partitions) - set(order))
        if unknown:
            names = ", ".join(k.to_user_string() for k in keys)
            raise ValueError(f"unknown partition(s) {unknown} for {names}; known: {order}")
        wanted = [k for k in order if k in partitions]
    policies = [graph.get(k).backfill_policy for k in keys]
    if all(p is not None and p.max_partitions_per_run is None for p in policies):  # BackfillPolicy.single_run()
        return [(None, range_tags(first, last)) for first, last in key_ranges(order, wanted)]
    return [(pk, {}) for pk in wanted]


def materialize_group(defs, group: str, instance, partitions: list[str] | None = None,
                      say=lambda m: None, tags: dict[str, str] | None = None, log_level: str = "info",
                      execution: Execution | None = None) -> list:
    """Materialize every asset of a group: unpartitioned stages as one run each, partitioned stages as one run per
    partition key (all keys, or only ``partitions``), or one run per range of keys where the assets have a
    single-run backfill policy; in this process, or as ``execution`` says (runs/parallel.py: up to N runs at once,
    steps in processes or on Dask). Stops after the first stage with a failed run. Returns the runs' results (all
    succeeded = the group is built); every run is recorded in ``instance`` (the UI), with ``tags`` beside the
    process tags. Dagster's console logger prints events at ``log_level`` and above (its default, debug, prints
    every engine event); the instance's event log keeps them all."""
    from dagster_project.defs.logs.partitions import RANGE_END_TAG, RANGE_START_TAG

    job = defs.resolve_implicit_global_asset_job_def()
    graph = defs.resolve_asset_graph()
    stages = group_stages(defs, group)
    if not stages:
        say(f"no assets in group {group!r}")
        return []
    # (asset keys, runs) per stage, validated before anything runs
    plan = [(keys, _stage_runs(graph, pdef, keys, partitions, instance)) for pdef, keys in stages]
    for leftover in remove_leftover_temp_files(group):
        say(f"removed {leftover}: a temp file left by a killed writer")
    run_config = {"loggers": {"console": {"config": {"log_level": log_level.upper()}}}}
    results = []
    for (pdef, _), (keys, runs) in zip(stages, plan):
        if execution is not None and not any(run_tags for _, run_tags in runs):  # ranges (logs) run here
            results.extend(run_stage(execution, keys, pdef, [pk for pk, _ in runs], instance, say, tags))
            if not all(r.success for r in results):
                break
            continue
        names = ", ".join(k.to_user_string() for k in keys)
        for pk, run_tags in runs:
            t0 = time.monotonic()
            result = job.execute_in_process(asset_selection=keys, partition_key=pk, instance=instance,
                                            raise_on_error=False, run_config=run_config,
                                            tags={**(tags or {}), **process_tags(), **run_tags})
            label = pk or (f"{run_tags[RANGE_START_TAG]}..{run_tags[RANGE_END_TAG]}" if run_tags else "")
            say(f"{names}{f' [{label}]' if label else ''}: {'ok' if result.success else 'FAILED'} "
                f"({time.monotonic() - t0:.1f}s)")
            results.append(result)
        if not all(r.success for r in results):
            break
    return results
