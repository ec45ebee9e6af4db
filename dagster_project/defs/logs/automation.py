"""Declarative automation downstream of the logs: the ClariLM assets built from the logs (groups questions,
facets, annotations) refresh once new log-day partitions have landed, through the `clarilm_refresh` automation
sensor (off until switched on in the UI, because each refresh spends LLM calls on the changed inputs)."""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg

REFRESHED_GROUPS = ("questions", "facets", "annotations")
SENSOR = "clarilm_refresh"
# eager: run after any upstream (a log day included) is updated, once none of them is missing or in progress,
# so a range of days being ingested triggers one refresh when its run ends, and a failed day blocks it.
REFRESH = dg.AutomationCondition.eager()


def refreshed_keys(assets: Sequence[dg.AssetsDefinition], logs_group: str) -> set[dg.AssetKey]:
    """The assets of REFRESHED_GROUPS that read the logs group, directly or not."""
    selection = dg.AssetSelection.groups(logs_group).downstream() & dg.AssetSelection.groups(*REFRESHED_GROUPS)
    return set(selection.resolve(assets))


def with_refresh(assets: Sequence[dg.AssetsDefinition], logs_group: str, interval_s: int
                 ) -> tuple[list[dg.AssetsDefinition], dg.AutomationConditionSensorDefinition | None]:
    """`assets` with REFRESH on those that read the logs, and the automation sensor that evaluates it (None when
    no asset reads the logs)."""
    keys = refreshed_keys(assets, logs_group)
    if not keys:
        return list(assets), None
    mapped = dg.map_asset_specs(
        lambda spec: spec.replace_attributes(automation_condition=REFRESH) if spec.key in keys else spec, assets)
    sensor = dg.AutomationConditionSensorDefinition(
        SENSOR, target=dg.AssetSelection.assets(*keys), default_status=dg.DefaultSensorStatus.STOPPED,
        minimum_interval_seconds=interval_s,
        description="Refresh the ClariLM questions, facets and annotations after new log days are materialized.")
    return list(mapped), sensor
