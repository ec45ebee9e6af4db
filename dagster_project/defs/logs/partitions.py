"""The log-day partitions: dynamic, holding only the days that have records (no calendar of empty days), and
the partition-range tags that make one run cover several days (what a single-run backfill launches)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import dagster as dg

LOG_DAYS = dg.DynamicPartitionsDefinition(name="log_days")
# Dagster's tags for a run over a partition range (set by single-run backfills; dagster._core.storage.tags)
RANGE_START_TAG, RANGE_END_TAG = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"


def new_days(instance: dg.DagsterInstance, days: Iterable[str]) -> list[str]:
    """The days (ISO keys) not registered yet, sorted: appended in this order, the partitions stay by date
    unless a day older than the newest registered one arrives late (it then sorts last in the UI)."""
    known = set(instance.get_dynamic_partitions(LOG_DAYS.name))
    return sorted(set(days) - known)


def register_days(instance: dg.DagsterInstance, days: Iterable[str]) -> list[str]:
    """Add the days that are not partitions yet; returns them."""
    added = new_days(instance, days)
    if added:
        instance.add_dynamic_partitions(LOG_DAYS.name, added)
    return added


def stored_days(assets_dir: str | Path) -> list[str]:
    """Days that have a stored raw_logs partition (after `dvc checkout`, before any run registered them)."""
    folder = Path(assets_dir) / "logs" / "raw_logs"
    return sorted(p.stem for p in folder.glob("[!.]*.parquet")) if folder.is_dir() else []  # not a temp file


def key_ranges(order: list[str], wanted: Iterable[str]) -> list[tuple[str, str]]:
    """The wanted keys as (first, last) runs of consecutive keys in the partition order `order`."""
    want = set(wanted)
    ranges: list[tuple[str, str]] = []
    start = prev = None
    for key in order:
        if key in want:
            start, prev = start or key, key
        elif start is not None:
            ranges.append((start, prev))
            start = None
    if start is not None:
        ranges.append((start, prev))
    return ranges


def range_tags(first: str, last: str) -> dict[str, str]:
    """Run tags for one run over the partitions first..last."""
    return {RANGE_START_TAG: first, RANGE_END_TAG: last}
