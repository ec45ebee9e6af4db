"""Group `logs` (ClariLM §3.2.1): chat logs -> one row per turn, the clarification prefilter, LLM extraction.

Every asset of the group is partitioned by day (the turn's `log_date`: the record's timestamp, else
logs.default_log_date or the file's mtime). A partition streams every file in logs.paths and keeps only
its own day's records, so a schedule can ingest yesterday's logs and a backfill can reprocess a date
range. `clarify materialize logs` (the DVC stage) runs only the days that have records.
"""

import datetime as dt
import time
from collections import Counter

import dagster as dg
import polars as pl

from dagster_project.config import LogsConfig
from dagster_project.core.clarilm.logs import (
    PREFILTER_REASONS,
    LogReadConfig,
    expand_paths,
    extraction_requests,
    ledger,
    load_logs,
    log_dates,
    parse_extractions,
    pass_rate,
    prefilter,
    skipped_extractions,
)
from dagster_project.llm.client import LLMResource
from dagster_project.resources.params import ParamsResource, definition_params

GROUP = "logs"


def _date(value: str | None) -> dt.date | None:
    return dt.date.fromisoformat(value) if value else None


def daily_partitions(cfg: LogsConfig) -> dg.DailyPartitionsDefinition:
    """One partition per log day from logs.partition_start; the newest is yesterday (today is still filling)."""
    return dg.DailyPartitionsDefinition(start_date=cfg.partition_start)


def read_config(cfg: LogsConfig, day: dt.date | None = None) -> LogReadConfig:
    return LogReadConfig(max_message_chars=cfg.max_message_chars, default_log_date=_date(cfg.default_log_date),
                         partition_date=day, batch_size=cfg.read_batch_size)


def days_to_ingest(cfg: LogsConfig, partition_keys: list[str]) -> tuple[list[str], Counter[dt.date]]:
    """The partition keys that have records (within logs.date_from / date_to), and every day's record count.

    Raises ValueError naming the days no partition can hold (before logs.partition_start, or not yet
    closed), so no record is skipped silently."""
    counts = log_dates(expand_paths(cfg.paths), read_config(cfg))
    known = set(partition_keys)
    lo, hi = _date(cfg.date_from), _date(cfg.date_to)
    wanted = {d for d in counts if (lo is None or d >= lo) and (hi is None or d <= hi)}
    homeless = sorted(d for d in wanted if d.isoformat() not in known)
    if homeless:
        span = f"{partition_keys[0]}..{partition_keys[-1]}" if partition_keys else "none"
        raise ValueError(
            f"logs: {sum(counts[d] for d in homeless)} records are dated {homeless[0]}..{homeless[-1]}, outside the "
            f"daily partitions ({span}): lower logs.partition_start, or wait until the day has ended, "
            "or narrow logs.date_from / date_to")
    return sorted(d.isoformat() for d in wanted), counts


PARTITIONS = daily_partitions(definition_params().logs)


@dg.multi_asset(
    group_name=GROUP,
    partitions_def=PARTITIONS,
    outs={
        "raw_logs": dg.AssetOut(key=[GROUP, "raw_logs"], kinds={"polars"},
                                description="One row per turn of every well-formed conversation of the day."),
        "raw_logs_rejected": dg.AssetOut(key=[GROUP, "raw_logs_rejected"], kinds={"polars"},
                                         description="Malformed log records of the day, one row each, with reason and field."),
        "raw_logs_ledger": dg.AssetOut(key=[GROUP, "raw_logs_ledger"], kinds={"polars"},
                                       description="Per file and day: records read, conversations kept, records rejected."),
    },
)
def raw_logs(context: dg.AssetExecutionContext, params: ParamsResource):
    """Stream every file in logs.paths (format detected per file), keep the partition's day, quarantine malformed records."""
    cfg = params.load().logs
    day = dt.date.fromisoformat(context.partition_key)
    t0 = time.monotonic()
    turns, rejected, stats = load_logs(expand_paths(cfg.paths), read_config(cfg, day))
    meta = stats.as_metadata() | {"read_s": round(time.monotonic() - t0, 3), "log_date": str(day)}
    context.log.info(f"logs {day}: {stats.records_read} records of the day read, {stats.conversations_kept} kept, "
                     f"{stats.records_rejected} rejected, {stats.turns} turns ({stats.other_dates} of other days)")
    yield dg.Output(turns, output_name="raw_logs", metadata=meta)
    yield dg.Output(rejected, output_name="raw_logs_rejected",
                    metadata={"records_read": stats.records_read, "records_rejected": stats.records_rejected})
    yield dg.Output(ledger(stats, day, turns, rejected), output_name="raw_logs_ledger",
                    metadata={"files": len(stats.read_by_source)})


@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"}, partitions_def=PARTITIONS,
          ins={"raw_logs": dg.AssetIn(key=[GROUP, "raw_logs"])})
def log_candidates(context: dg.AssetExecutionContext, params: ParamsResource, raw_logs: pl.DataFrame) -> pl.DataFrame:
    """Every assistant turn; `kept` when it asks the user something short and is followed by a user reply."""
    cfg = params.load().logs
    t0 = time.monotonic()
    out = prefilter(raw_logs, cfg.prefilter_max_chars).collect()
    secs = time.monotonic() - t0
    reasons = dict(out.group_by("reject_reason").len().drop_nulls().iter_rows())
    context.add_output_metadata({
        "assistant_turns": out.height, "candidates": int(out["kept"].sum()),
        "pass_rate": round(pass_rate(out), 4), "prefilter_s": round(secs, 3),
        "turns_per_s": round(raw_logs.height / max(secs, 1e-9)),
        **{f"rejected_{r}": int(reasons.get(r, 0)) for r in PREFILTER_REASONS},
    })
    return out


@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"}, partitions_def=PARTITIONS,
          ins={"log_candidates": dg.AssetIn(key=[GROUP, "log_candidates"])})
def log_clarifications(context: dg.AssetExecutionContext, params: ParamsResource, llm: LLMResource,
                       log_candidates: pl.DataFrame) -> pl.DataFrame:
    """(q_i, c, q_{i+1}, f) tuples: the extractor judges each kept candidate with few-shot demonstrations
    (logs.max_extractions caps the calls per day)."""
    cfg = params.load().logs
    cands = log_candidates.filter(pl.col("kept")).sort("candidate_id")
    limit = cfg.max_extractions
    todo, skipped = (cands.head(limit), cands.slice(limit)) if limit else (cands, cands.clear())
    reqs = extraction_requests(todo, cfg.extraction_temperature)
    results = llm.chat("extractor", reqs, context)
    out = parse_extractions(todo, reqs, results)
    if skipped.height:
        out = pl.concat([out, skipped_extractions(skipped, limit)], how="diagonal_relaxed")
    status = dict(out.group_by("status").len().iter_rows())
    context.add_output_metadata({
        **llm.usage("extractor", results), "candidates": cands.height, "tuples": int(out["kept"].sum()),
        **{f"status_{k}": int(v) for k, v in sorted(status.items())},
        "not_clarification": int((out["reject_reason"] == "not_clarification").sum()),
    })
    return out


logs_daily_job = dg.define_asset_job(
    "logs_daily", selection=dg.AssetSelection.groups(GROUP), partitions_def=PARTITIONS,
    description="Ingest one day of chat logs: raw turns, the prefilter and the LLM extraction.")

# Each midnight (UTC) ingests the day that just ended. Off until switched on in the UI (Automation tab).
logs_daily_schedule = dg.build_schedule_from_partitioned_job(logs_daily_job, hour_of_day=0, minute_of_hour=30)
