"""Nightly backfills, off until switched on in the UI (like the sensors): `logs_backfill` ingests every log day
that has records but is not materialized yet, as one single-run backfill (the group's BackfillPolicy: one run per
consecutive range of such days, a range being one run that reads every file once); `clarilm_nightly` then
refreshes the ClariLM chain (questions, facets, annotations) when log days were materialized after its last
refresh. Their cron strings are logs.backfill_cron and logs.refresh_cron.

Dagster's scheduler launches runs only (a backfill request is a sensor feature), so the backfill is requested as
the runs a single-run backfill of those days would launch, tagged as a partition range each.
"""

from __future__ import annotations

import dagster as dg

from dagster_project.config import LogsConfig, ParamsError
from dagster_project.core.clarilm.logs import days_to_ingest
from dagster_project.defs.logs.automation import REFRESHED_GROUPS
from dagster_project.defs.logs.partitions import LOG_DAYS, key_ranges, range_tags, register_days
from dagster_project.io.records import InputFileError

LOGS_SCHEDULE = "logs_backfill"
CLARILM_SCHEDULE = "clarilm_nightly"
CLARILM_JOB = "clarilm_refresh_job"


def missing_days(instance: dg.DagsterInstance, cfg: LogsConfig, keys: list[dg.AssetKey]) -> tuple[list[str], list[str]]:
    """(every day with records within logs.date_from / date_to, the ones some asset of `keys` has not
    materialized), both sorted; one streamed pass over logs.paths."""
    days, _ = days_to_ingest(cfg)
    done = set.intersection(*(set(instance.get_materialized_partitions(k)) for k in keys)) if keys else set()
    return days, [d for d in days if d not in done]


def backfill_tick(context: dg.ScheduleEvaluationContext, cfg: LogsConfig, keys: list[dg.AssetKey],
                  job_name: str) -> list[dg.RunRequest] | dg.SkipReason:
    """Register the days not registered yet, then one run per consecutive range of the missing days."""
    try:
        days, missing = missing_days(context.instance, cfg, keys)
    except InputFileError as err:
        return dg.SkipReason(f"logs.paths: {err}")
    if not missing:
        return dg.SkipReason(f"every one of the {len(days)} log days with records is materialized")
    register_days(context.instance, missing)
    order = context.instance.get_dynamic_partitions(LOG_DAYS.name)
    tick = context.scheduled_execution_time.isoformat() if context.scheduled_execution_time else "manual"
    context.log.info(f"{len(missing)} of {len(days)} log days not materialized: {missing[0]}..{missing[-1]}")
    return [dg.RunRequest(run_key=f"{tick}:{first}..{last}", job_name=job_name, tags=range_tags(first, last))
            for first, last in key_ranges(order, missing)]


def last_materialized(instance: dg.DagsterInstance, key: dg.AssetKey) -> float | None:
    """Timestamp of the asset's latest materialization (any partition), None if it has none."""
    event = instance.get_latest_materialization_event(key)
    return event.timestamp if event is not None else None


def refresh_tick(context: dg.ScheduleEvaluationContext, logs_keys: list[dg.AssetKey],
                 refreshed: list[dg.AssetKey]) -> dg.RunRequest | dg.SkipReason:
    """One run of the ClariLM chain when a log day was materialized after the chain's oldest refresh (or a
    chain asset was never built); skipped while the logs hold nothing."""
    logs = [t for t in (last_materialized(context.instance, k) for k in logs_keys) if t is not None]
    if not logs:
        return dg.SkipReason("no log day is materialized yet (logs_backfill or logs_new_files ingests them)")
    chain = [last_materialized(context.instance, k) for k in refreshed]
    oldest = None if any(t is None for t in chain) else min(chain, default=None)
    if oldest is not None and oldest >= max(logs):
        return dg.SkipReason("the ClariLM assets are newer than every log day materialization")
    return dg.RunRequest(run_key=f"clarilm:{max(logs)}", job_name=CLARILM_JOB)


def _cron(value: str, key: str) -> str:
    """The cron string of params key `key`, checked by Dagster's own parser; ParamsError naming the key."""
    try:
        dg.ScheduleDefinition(name="cron_check", cron_schedule=value, job_name="cron_check")
    except dg.DagsterInvalidDefinitionError as err:
        raise ParamsError(f"{key}: {value!r} is not a cron string (e.g. '0 2 * * *'): {err}") from None
    return value


def build_schedules(cfg: LogsConfig, job: dg.UnresolvedAssetJobDefinition, logs_keys: list[dg.AssetKey],
                    logs_group: str) -> list[dg.ScheduleDefinition]:
    """`logs_backfill` on `job` (the logs_ingest job) and `clarilm_nightly` on a job over the ClariLM assets that
    read the logs; both stopped by default."""
    backfill_cron = _cron(cfg.backfill_cron, "logs.backfill_cron")
    refresh_cron = _cron(cfg.refresh_cron, "logs.refresh_cron")
    refresh_job = dg.define_asset_job(
        CLARILM_JOB, selection=dg.AssetSelection.groups(logs_group).downstream()
        & dg.AssetSelection.groups(*REFRESHED_GROUPS),
        description="Refresh the ClariLM questions, facets and annotations from every materialized log day.")

    @dg.schedule(name=LOGS_SCHEDULE, cron_schedule=backfill_cron, job=job,
                 default_status=dg.DefaultScheduleStatus.STOPPED,
                 description="Ingest the log days under logs.paths that are not materialized yet (one single-run "
                             "backfill: a run per consecutive range of days).")
    def logs_backfill(context: dg.ScheduleEvaluationContext):
        return backfill_tick(context, cfg, logs_keys, job.name)

    @dg.schedule(name=CLARILM_SCHEDULE, cron_schedule=refresh_cron, job=refresh_job,
                 default_status=dg.DefaultScheduleStatus.STOPPED,
                 description="Refresh the ClariLM chain when log days were materialized after its last refresh.")
    def clarilm_nightly(context: dg.ScheduleEvaluationContext):
        if context.repository_def is None:
            return dg.SkipReason("evaluated without its repository: the ClariLM assets are unknown")
        refreshed = sorted(refresh_job.selection.resolve(context.repository_def.asset_graph))
        return refresh_tick(context, logs_keys, refreshed)

    return [logs_backfill, clarilm_nightly]
