"""Group `logs` (ClariLM §3.2.1): chat logs -> one row per turn, FM-LOG candidates of two sources
(user refinements, as the paper; assistant questions), LLM extraction of (q_i, c, q_{i+1}, f).

Every asset of the group is partitioned by log day (the turn's `log_date`: the record's timestamp, else
logs.default_log_date or the file's mtime), on dynamic partitions that hold only the days that have records:
`clarify materialize logs` and the `logs_new_files` sensor register them (docs/clarilm.md, log partitions). Each asset
has a single-run backfill policy: a run over a range of days reads every file once and routes each record to
its day, streaming each read batch into one Parquet file per day (memory bounded by the batch, not the log).
"""

import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import dagster as dg
import duckdb
import polars as pl
import pyarrow.parquet as pq

from dagster_project.config import LogsConfig, Params
from dagster_project.core.clarilm.extraction import EXTRACTION_COLUMNS, NOT_IN_LOG, extract_stream
from dagster_project.core.clarilm.logs import (
    SOURCES,
    TURN_SCHEMA,
    CandidateCounts,
    DayTally,
    ReadStats,
    days_to_ingest,
    prefilter,
    stream_days,
    tally_ledger,
)
from dagster_project.defs.logs.partitions import LOG_DAYS
from dagster_project.defs.logs.schedules import build_schedules
from dagster_project.defs.logs.sensors import build_sensor
from dagster_project.io.formats.chat_logs import expand_paths
from dagster_project.io.records import QUARANTINE_SCHEMA
from dagster_project.io.writers import PartitionWriters
from dagster_project.lib.assets import group_asset, status_counts
from dagster_project.lib.resources import LLMResource
from dagster_project.lib.io_manager import LAZY
from dagster_project.lib.warehouse import read_row_groups

GROUP = "logs"
JOB = "logs_ingest"
SINGLE_RUN = dg.BackfillPolicy.single_run()
# backfill_policy is marked beta on @asset; it is the documented way to get single-run backfills
warnings.filterwarnings("ignore", r"Parameter `backfill_policy`", dg.BetaWarning)


def _run_days(context: dg.AssetExecutionContext) -> list[str]:
    """The run's partition keys: one day, or every day of a single-run backfill's range."""
    return list(context.partition_keys)


def days_to_materialize(cfg: LogsConfig) -> tuple[list[str], Counter[date]]:
    """The log days with records within logs.date_from / date_to (what `clarify materialize logs` registers and
    runs), and every day's record count: one streamed pass over logs.paths."""
    return days_to_ingest(cfg)


def kept_candidates(path: Path, cfg: LogsConfig) -> Iterator[pl.DataFrame]:
    """A stored day of log_candidates, logs.read_batch_size rows at a time: its kept rows of the sources in
    logs.sources, the first logs.max_extractions of them in candidate_id order (the ones the extractor judges:
    DuckDB's top-N, memory of N rows), then the others in stored order (streamed)."""
    limit = cfg.max_extractions
    head = pl.DataFrame()
    if limit is not None:
        with duckdb.connect() as con:
            head = con.sql("select * from read_parquet($1) where kept and list_contains($2, source) "
                           "order by candidate_id limit $3", params=[str(path), list(cfg.sources), limit]).pl()
        yield from head.iter_slices(cfg.read_batch_size)
    first = set(head["candidate_id"]) if head.height else set()
    for batch in pq.ParquetFile(path).iter_batches(batch_size=cfg.read_batch_size):
        rest = pl.from_arrow(batch).filter(pl.col("kept") & pl.col("source").is_in(list(cfg.sources))
                                           & ~pl.col("candidate_id").is_in(list(first)))
        if rest.height:
            yield rest


def extraction_counts(part: pl.DataFrame) -> Counter[str]:
    """A batch of log_clarifications rows as metadata counts: rows, tuples (per source), statuses, reject reasons."""
    tuples = part.filter(pl.col("kept"))
    return Counter({"candidates": part.height, "tuples": tuples.height,
                    **{f"tuples_{s}": int((tuples["source"] == s).sum()) for s in SOURCES},
                    **status_counts(part),
                    **{r: int((part["reject_reason"] == r).sum()) for r in ("not_clarification", NOT_IN_LOG)}})


def build(params: Params) -> dg.Definitions:
    """The group's assets on the log-day partitions, the `logs_ingest` job, the sensor that feeds it and the
    nightly schedules (logs_backfill, clarilm_nightly)."""
    partitions = LOG_DAYS
    asset = group_asset(GROUP)

    @dg.multi_asset(
        group_name=GROUP,
        partitions_def=partitions,
        backfill_policy=SINGLE_RUN,
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
        """Stream every file in logs.paths once (format detected per file), route each record to its day among
        the run's partitions, quarantine malformed records. Each read batch goes straight to its days' Parquet
        files (staged, then moved into place by the IO manager), so memory does not grow with the log."""
        cfg = params.logs
        keys = _run_days(context)
        t0 = time.monotonic()
        stats, tally = ReadStats(), DayTally()
        with tempfile.TemporaryDirectory(prefix="raw_logs_") as tmp:
            turns = PartitionWriters(Path(tmp, "turns"), keys, TURN_SCHEMA, cfg.read_batch_size)
            rejected = PartitionWriters(Path(tmp, "rejected"), keys, QUARANTINE_SCHEMA, cfg.read_batch_size)
            days = [date.fromisoformat(k) for k in keys]
            for day, t, r in stream_days(expand_paths(cfg.paths), cfg, days, stats, tally):
                turns.write(day.isoformat(), t)
                rejected.write(day.isoformat(), r)
            turn_files, rejected_files = turns.close(), rejected.close()
            meta = stats.as_metadata() | {"read_s": round(time.monotonic() - t0, 3), "log_days": len(keys),
                                          "log_date": keys[0] if len(keys) == 1 else f"{keys[0]}..{keys[-1]}"}
            context.log.info(f"logs {meta['log_date']}: {stats.records_read} records of {len(keys)} day(s) read, "
                             f"{stats.conversations_kept} kept, {stats.records_rejected} rejected, {stats.turns} "
                             f"turns ({stats.other_dates} of other days)")
            yield dg.Output(turn_files, output_name="raw_logs", metadata=meta)
            yield dg.Output(rejected_files, output_name="raw_logs_rejected",
                            metadata={"records_read": stats.records_read, "records_rejected": stats.records_rejected})
        yield dg.Output({k: tally_ledger(stats, d, tally) for k, d in zip(keys, days, strict=True)},
                        output_name="raw_logs_ledger", metadata={"files": len(stats.read_by_source)})

    @asset(partitions_def=partitions, backfill_policy=SINGLE_RUN,
           ins={"raw_logs": dg.AssetIn(key=[GROUP, "raw_logs"], metadata={LAZY: True})})
    def log_candidates(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                       raw_logs: dict[str, Path]):
        """FM-LOG candidates of each source in logs.sources: every pair of consecutive user questions
        (user_refinement) and every assistant turn, kept when it asks the user something (assistant_asked).
        Streamed: one stored row group of raw_logs at a time (a conversation never spans two)."""
        cfg = params.logs
        keys = _run_days(context)
        t0 = time.monotonic()
        counts = CandidateCounts()
        schema = prefilter(pl.DataFrame(schema=TURN_SCHEMA), cfg.prefilter_max_chars, cfg.sources).collect_schema()
        with tempfile.TemporaryDirectory(prefix="log_candidates_") as tmp:
            out = PartitionWriters(tmp, keys, dict(schema), cfg.read_batch_size)
            for key, path in raw_logs.items():
                for turns in read_row_groups(path):
                    part = prefilter(turns, cfg.prefilter_max_chars, cfg.sources).collect()
                    counts.add(turns.height, part)
                    out.write(key, part)
            files = out.close()
            secs = time.monotonic() - t0
            yield dg.Output(files, metadata={**counts.as_metadata(), "prefilter_s": round(secs, 3),
                                             "turns_per_s": round(counts.turns / max(secs, 1e-9))})

    @asset(partitions_def=partitions, backfill_policy=SINGLE_RUN,
           ins={"log_candidates": dg.AssetIn(key=[GROUP, "log_candidates"], metadata={LAZY: True})})
    def log_clarifications(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                           llm: dg.ResourceParam[LLMResource], log_candidates: dict[str, Path]):
        """(q_i, c, q_{i+1}, f) tuples: the extractor judges each kept candidate with its source's few-shot
        demonstrations; a logged question the model did not copy from the log is marked (question_not_in_log).
        logs.max_extractions caps the calls per day (the first candidates in candidate_id order). Streamed: each
        day's candidates are read logs.read_batch_size at a time, and each batch's rows go straight to that day's
        Parquet file."""
        cfg = params.logs
        with tempfile.TemporaryDirectory(prefix="log_clarifications_") as tmp:
            days = _run_days(context)
            out = PartitionWriters(tmp, days, EXTRACTION_COLUMNS, cfg.read_batch_size)
            for key in days:  # each day's own usage and counts (zeros for a day without candidates)
                chat = llm.session(context)
                tally = extraction_counts(pl.DataFrame(schema=EXTRACTION_COLUMNS))
                for part in (extract_stream(chat, kept_candidates(log_candidates[key], cfg), cfg)
                             if key in log_candidates else ()):
                    tally.update(extraction_counts(part))
                    out.write(key, part)
                context.add_asset_metadata({**chat.usage(), **tally}, partition_key=key)
            files = out.close()
            yield dg.Output(files)

    job = dg.define_asset_job(
        JOB, selection=dg.AssetSelection.groups(GROUP), partitions_def=partitions,
        description="Ingest days of chat logs: raw turns, the prefilter and the LLM extraction (a range of days is "
                    "one run that reads every file once).")
    assets = [raw_logs, log_candidates, log_clarifications]
    return dg.Definitions(assets=assets, jobs=[job], sensors=[build_sensor(params.logs, job)],
                          schedules=build_schedules(params.logs, job, sorted(k for a in assets for k in a.keys), GROUP))
