"""Run one asset group the way `clarify materialize` does: its stages in dependency order, one run per partition key
(or per key range, or rectangle of subject x method keys, under a single-run backfill policy), in this process or in
parallel (runs/parallel.py)."""

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


def rectangles(pdef, wanted: list[str]) -> list[tuple[str, str]]:
    """The wanted keys of a two-dimensional MultiPartitionsDefinition as (first, last) key ranges, each exactly a
    rectangle of them (Dagster reads a multi-partition range as the product of its dimensions' ranges): per value
    of one dimension, the runs of consecutive wanted values of the other, equal neighbours merged; of the two
    orientations, the one with fewer ranges."""
    import dagster as dg

    from dagster_project.defs.logs.partitions import key_ranges

    dims = list(pdef.partitions_defs)
    want = [pdef.get_partition_key_from_str(str(k)).keys_by_dimension for k in wanted]
    best: list[tuple[str, str]] | None = None
    for outer, inner in ((dims[0], dims[1]), (dims[1], dims[0])):
        inner_keys = inner.partitions_def.get_partition_keys()
        per = [(o, key_ranges(inner_keys, [w[inner.name] for w in want if w[outer.name] == o]))
               for o in outer.partitions_def.get_partition_keys()]
        found: list[tuple[str, str]] = []
        i = 0
        while i < len(per):
            j = i  # per[i..j]: neighbours with the same inner ranges, one rectangle per range
            while j + 1 < len(per) and per[j + 1][1] == per[i][1]:
                j += 1
            found += [(str(dg.MultiPartitionKey({outer.name: per[i][0], inner.name: lo})),
                       str(dg.MultiPartitionKey({outer.name: per[j][0], inner.name: hi}))) for lo, hi in per[i][1]]
            i = j + 1
        if best is None or len(found) < len(best):
            best = found
    return best or []


def _stage_runs(graph, pdef, keys: list, partitions: list[str] | None, instance,
                parallel: bool = False) -> list[tuple[str | None, dict]]:
    """(partition key, run tags) per run of one stage: one run per key, or, when every asset of the stage has a
    single-run backfill policy, one run per consecutive range of keys (each run reads its inputs once); for
    subject x method keys, per rectangle of them, unless the runs go to processes of their own (``parallel``)."""
    import dagster as dg

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
    multi = isinstance(pdef, dg.MultiPartitionsDefinition)
    if all(p is not None and p.max_partitions_per_run is None for p in policies) and not (multi and parallel):
        ranges = rectangles(pdef, wanted) if multi else key_ranges(order, wanted)  # BackfillPolicy.single_run()
        return [(None, range_tags(first, last)) for first, last in ranges]
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
    plan = [(keys, _stage_runs(graph, pdef, keys, partitions, instance, execution is not None))
            for pdef, keys in stages]
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
