"""The dynamic log-day partitions a `clarify materialize` run registers on its Dagster instance before it starts."""

from __future__ import annotations


def sync_log_days(instance, group: str, days: list[str] | None, whole_group: bool, assets_dir: str) -> None:
    """Register the log-day partitions a run needs: for `logs`, the days that have records (and, for a run of
    every day, forget days that no longer have any); for other groups, the days stored in assets/logs/ (so a
    group downstream of the logs reads every stored day, also after `dvc checkout` into a fresh DAGSTER_HOME)."""
    from dagster_project.defs.logs.partitions import LOG_DAYS, register_days, stored_days

    if group != "logs":
        register_days(instance, stored_days(assets_dir))
        return
    register_days(instance, days or [])
    if whole_group and days is not None:
        for gone in sorted(set(instance.get_dynamic_partitions(LOG_DAYS.name)) - set(days)):
            instance.delete_dynamic_partition(LOG_DAYS.name, gone)
