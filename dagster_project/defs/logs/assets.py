"""Group `logs` (ClariLM §3.2.1): chat logs -> one row per turn, FM-LOG candidates of two sources
(user refinements, as the paper; assistant questions), LLM extraction of (q_i, c, q_{i+1}, f).

Every asset of the group is partitioned by day (the turn's `log_date`: the record's timestamp, else
logs.default_log_date or the file's mtime). A partition streams every file in logs.paths and keeps only
its own day's records, so a schedule can ingest yesterday's logs and a backfill can reprocess a date
range. `clarify materialize logs` (the DVC stage) runs only the days that have records. The partitions
come from params (logs.partition_start): `build(params)` makes the group.
"""

import time
from collections import Counter
from datetime import date

import dagster as dg
import polars as pl

from dagster_project.config import LogsConfig, Params
from dagster_project.core.clarilm.extraction import NOT_IN_LOG, extract_day
from dagster_project.core.clarilm.logs import (
    PREFILTER_REASONS,
    SOURCES,
    days_to_ingest,
    dropped_by_length,
    ledger,
    load_logs,
    pass_rate,
    prefilter,
)
from dagster_project.io.formats.chat_logs import expand_paths
from dagster_project.lib.assets import group_asset, status_counts, upstream
from dagster_project.lib.resources import LLMResource

GROUP = "logs"


def daily_partitions(cfg: LogsConfig) -> dg.DailyPartitionsDefinition:
    """One partition per log day from logs.partition_start; the newest is yesterday (today is still filling)."""
    return dg.DailyPartitionsDefinition(start_date=cfg.partition_start)


def days_to_materialize(cfg: LogsConfig) -> tuple[list[str], Counter[date]]:
    """The daily partitions that hold records (what `clarify materialize logs` runs) and every day's count;
    ValueError names days no partition can hold."""
    return days_to_ingest(cfg, daily_partitions(cfg).get_partition_keys())


def build(params: Params) -> dg.Definitions:
    """The group's assets on daily partitions from params.logs, the `logs_daily` job and its schedule."""
    partitions = daily_partitions(params.logs)
    asset = group_asset(GROUP)

    @dg.multi_asset(
        group_name=GROUP,
        partitions_def=partitions,
        outs={
            "raw_logs": dg.AssetOut(key=[GROUP, "raw_logs"], kinds={"polars"},
                                    description="One row per turn of every well-formed conversation of the day."),
            "raw_logs_rejected": dg.AssetOut(key=[GROUP, "raw_logs_rejected"], kinds={"polars"},
                                             description="Malformed log records of the day (io.records Quarantine)."),
            "raw_logs_ledger": dg.AssetOut(key=[GROUP, "raw_logs_ledger"], kinds={"polars"},
                                           description="Per file and day: records read, conversations kept, "
                                                       "records rejected."),
        },
    )
    def raw_logs(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params]):
        """Stream every file in logs.paths (format detected per file), keep the partition's day, quarantine
        malformed records."""
        cfg = params.logs
        day = date.fromisoformat(context.partition_key)
        t0 = time.monotonic()
        turns, rejected, stats = load_logs(expand_paths(cfg.paths), cfg, day)
        meta = stats.as_metadata() | {"read_s": round(time.monotonic() - t0, 3), "log_date": str(day)}
        context.log.info(f"logs {day}: {stats.records_read} records of the day read, {stats.conversations_kept} "
                         f"kept, {stats.records_rejected} rejected, {stats.turns} turns "
                         f"({stats.other_dates} of other days)")
        yield dg.Output(turns, output_name="raw_logs", metadata=meta)
        yield dg.Output(rejected, output_name="raw_logs_rejected",
                        metadata={"records_read": stats.records_read, "records_rejected": stats.records_rejected})
        yield dg.Output(ledger(stats, day, turns, rejected), output_name="raw_logs_ledger",
                        metadata={"files": len(stats.read_by_source)})

    @asset(partitions_def=partitions, ins=upstream("logs/raw_logs"))
    def log_candidates(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                       raw_logs: pl.DataFrame) -> pl.DataFrame:
        """FM-LOG candidates of each source in logs.sources: every pair of consecutive user questions
        (user_refinement) and every assistant turn, kept when it asks the user something (assistant_asked)."""
        cfg = params.logs
        t0 = time.monotonic()
        out = prefilter(raw_logs, cfg.prefilter_max_chars, cfg.sources).collect()
        secs = time.monotonic() - t0
        reasons = dict(out.group_by("reject_reason").len().drop_nulls().iter_rows())
        kept = out.filter(pl.col("kept"))
        context.add_output_metadata({
            "rows": out.height, "candidates": kept.height, "pass_rate": round(pass_rate(out), 4),
            **{f"candidates_{s}": int((kept["source"] == s).sum()) for s in SOURCES},
            "dropped_by_length": dropped_by_length(out), "prefilter_s": round(secs, 3),
            "turns_per_s": round(raw_logs.height / max(secs, 1e-9)),
            **{f"rejected_{r}": int(reasons.get(r, 0)) for r in PREFILTER_REASONS},
        })
        return out

    @asset(partitions_def=partitions, ins=upstream("logs/log_candidates"))
    def log_clarifications(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                           llm: dg.ResourceParam[LLMResource], log_candidates: pl.DataFrame) -> pl.DataFrame:
        """(q_i, c, q_{i+1}, f) tuples: the extractor judges each kept candidate with its source's few-shot
        demonstrations; a logged question the model did not copy from the log is marked (question_not_in_log).
        logs.max_extractions caps the calls per day."""
        chat = llm.session(context)
        out = extract_day(chat, log_candidates, params.logs)
        tuples = out.filter(pl.col("kept"))
        context.add_output_metadata({
            **chat.usage(), "candidates": out.height, "tuples": tuples.height,
            **{f"tuples_{s}": int((tuples["source"] == s).sum()) for s in SOURCES},
            **dict(sorted(status_counts(out).items())),
            **{r: int((out["reject_reason"] == r).sum()) for r in ("not_clarification", NOT_IN_LOG)},
        })
        return out

    job = dg.define_asset_job(
        "logs_daily", selection=dg.AssetSelection.groups(GROUP), partitions_def=partitions,
        description="Ingest one day of chat logs: raw turns, the prefilter and the LLM extraction.")
    # Each midnight (UTC) ingests the day that just ended. Off until switched on in the UI (Automation tab).
    schedule = dg.build_schedule_from_partitioned_job(job, hour_of_day=0, minute_of_hour=30)
    return dg.Definitions(assets=[raw_logs, log_candidates, log_clarifications], jobs=[job], schedules=[schedule])
