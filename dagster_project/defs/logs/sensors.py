"""`logs_new_files`: notices new, changed and removed files under logs.paths and requests the log days they
touch (only those), registering days it has not seen; one run per consecutive range of days, so a file that
spans 30 days is one run that reads every file once.

The cursor keeps, per file, its size, mtime and the days its records fall on; a tick reads only the files whose
size or mtime changed (one streamed pass each) to learn their days. A changed or removed file also touches the
days it used to hold. Known limit: a new file that repeats a conversation id of another file's record on a
different day changes that day too (the later record becomes the duplicate) without that day being requested.
"""

from __future__ import annotations

import hashlib
import json
from datetime import date
from pathlib import Path

import dagster as dg

from dagster_project.config import LogsConfig
from dagster_project.core.clarilm.logs import file_log_dates, in_window
from dagster_project.defs.logs.partitions import LOG_DAYS, key_ranges, new_days, range_tags
from dagster_project.io.formats.chat_logs import expand_paths
from dagster_project.io.records import InputFileError

SENSOR = "logs_new_files"
FileState = dict[str, list]  # path -> [size, mtime_ns, [ISO days]]


def _stat(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns]


def changes(cfg: LogsConfig, before: FileState) -> tuple[FileState, set[str], list[str]]:
    """The new file state, the days touched since `before` (within logs.date_from / date_to), and the changed or
    removed files. Raises InputFileError when logs.paths matches no file."""
    now = {p.as_posix(): (p, _stat(p)) for p in expand_paths(cfg.paths)}
    changed = [f for f, (_, st) in now.items() if before.get(f, [None, None])[:2] != st]
    removed = [f for f in before if f not in now]
    state = {f: before[f] for f in now if f not in changed}
    touched = {d for f in [*changed, *removed] if f in before for d in before[f][2]}
    if changed:
        _, per_file = file_log_dates([now[f][0] for f in changed], cfg)
        for f in changed:
            days = sorted(d.isoformat() for d in per_file.get(f, {}))
            state[f] = [*now[f][1], days]
            touched.update(days)
    window = {d.isoformat() for d in in_window(cfg, map(date.fromisoformat, touched))}
    return state, window, sorted(changed + removed)


def evaluate(context: dg.SensorEvaluationContext, cfg: LogsConfig, job_name: str) -> dg.SensorResult | dg.SkipReason:
    """One tick: SkipReason when nothing changed, else the partitions to add and the runs to request."""
    before: FileState = json.loads(context.cursor)["files"] if context.cursor else {}
    try:
        state, days, files = changes(cfg, before)
    except InputFileError as err:
        return dg.SkipReason(f"logs.paths: {err}")
    cursor = json.dumps({"files": state}, sort_keys=True)
    if not files:
        return dg.SkipReason(f"no new, changed or removed files among the {len(state)} under logs.paths")
    if not days:
        context.update_cursor(cursor)
        return dg.SkipReason(f"{len(files)} file(s) changed ({', '.join(files[:3])}) but hold no records within "
                             "logs.date_from / date_to")
    added = new_days(context.instance, days)
    order = [*context.instance.get_dynamic_partitions(LOG_DAYS.name), *added]
    tick = hashlib.sha256(cursor.encode()).hexdigest()[:16]
    runs = [dg.RunRequest(run_key=f"{tick}:{first}..{last}", job_name=job_name, tags=range_tags(first, last))
            for first, last in key_ranges(order, days)]
    context.log.info(f"{len(files)} file(s) changed: days {min(days)}..{max(days)} "
                     f"({len(days)}), {len(added)} new, {len(runs)} run(s)")
    return dg.SensorResult(run_requests=runs, cursor=cursor,
                           dynamic_partitions_requests=[LOG_DAYS.build_add_request(added)] if added else [])


def build_sensor(cfg: LogsConfig, job: dg.UnresolvedAssetJobDefinition) -> dg.SensorDefinition:
    """The sensor over logs.paths, polling every logs.sensor_interval_s; off until switched on in the UI."""

    @dg.sensor(name=SENSOR, job=job, minimum_interval_seconds=cfg.sensor_interval_s,
               default_status=dg.DefaultSensorStatus.STOPPED,
               description="New or changed log files under logs.paths -> ingest the days they touch.")
    def logs_new_files(context: dg.SensorEvaluationContext):
        return evaluate(context, cfg, job.name)

    return logs_new_files
