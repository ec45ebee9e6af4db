"""Group `logs` (ClariLM §3.2.1): chat logs -> one row per turn, FM-LOG candidates of two sources
(user refinements, as the paper; assistant questions), LLM extraction of (q_i, c, q_{i+1}, f).

Every asset of the group is partitioned by log day (the turn's `log_date`: the record's timestamp, else
logs.default_log_date or the file's mtime), on dynamic partitions that hold only the days that have records:
`clarify materialize logs` and the `logs_new_files` sensor register them (README "Log partitions"). Each asset
has a single-run backfill policy: a run over a range of days reads every file once and routes each record to
its day, writing one Parquet file per day.
"""

import time
import warnings
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
    load_days,
    pass_rate,
    prefilter,
)
from dagster_project.defs.logs.partitions import LOG_DAYS
from dagster_project.defs.logs.sensors import build_sensor
from dagster_project.io.formats.chat_logs import expand_paths
from dagster_project.lib.assets import group_asset, status_counts, upstream
from dagster_project.lib.resources import LLMResource

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


def by_day(df: pl.DataFrame, keys: list[str]) -> dict[str, pl.DataFrame]:
    """{day key: that day's rows} for every key (empty frames for days without rows), split on `log_date`."""
    parts = df.partition_by("log_date", as_dict=True, maintain_order=True)
    return {k: parts.get((date.fromisoformat(k),), df.clear()) for k in keys}


def build(params: Params) -> dg.Definitions:
    """The group's assets on the log-day partitions, the `logs_ingest` job and the sensor that feeds it."""
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
        the run's partitions, quarantine malformed records."""
        cfg = params.logs
        keys = _run_days(context)
        t0 = time.monotonic()
        days, stats = load_days(expand_paths(cfg.paths), cfg, [date.fromisoformat(k) for k in keys])
        meta = stats.as_metadata() | {"read_s": round(time.monotonic() - t0, 3), "log_days": len(keys),
                                      "log_date": keys[0] if len(keys) == 1 else f"{keys[0]}..{keys[-1]}"}
        context.log.info(f"logs {meta['log_date']}: {stats.records_read} records of {len(keys)} day(s) read, "
                         f"{stats.conversations_kept} kept, {stats.records_rejected} rejected, {stats.turns} turns "
                         f"({stats.other_dates} of other days)")
        parts = {k: days[date.fromisoformat(k)] for k in keys}
        yield dg.Output({k: t for k, (t, _) in parts.items()}, output_name="raw_logs", metadata=meta)
        yield dg.Output({k: r for k, (_, r) in parts.items()}, output_name="raw_logs_rejected",
                        metadata={"records_read": stats.records_read, "records_rejected": stats.records_rejected})
        yield dg.Output({k: ledger(stats, date.fromisoformat(k), t, r) for k, (t, r) in parts.items()},
                        output_name="raw_logs_ledger", metadata={"files": len(stats.read_by_source)})

    @asset(partitions_def=partitions, backfill_policy=SINGLE_RUN, ins=upstream("logs/raw_logs"))
    def log_candidates(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                       raw_logs: pl.DataFrame) -> dict[str, pl.DataFrame]:
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
        return by_day(out, _run_days(context))

    @asset(partitions_def=partitions, backfill_policy=SINGLE_RUN, ins=upstream("logs/log_candidates"))
    def log_clarifications(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                           llm: dg.ResourceParam[LLMResource], log_candidates: pl.DataFrame
                           ) -> dict[str, pl.DataFrame]:
        """(q_i, c, q_{i+1}, f) tuples: the extractor judges each kept candidate with its source's few-shot
        demonstrations; a logged question the model did not copy from the log is marked (question_not_in_log).
        logs.max_extractions caps the calls per day."""
        chat = llm.session(context)
        keys = _run_days(context)
        days = {k: extract_day(chat, part, params.logs) for k, part in by_day(log_candidates, keys).items()}
        out = pl.concat(days.values())
        tuples = out.filter(pl.col("kept"))
        context.add_output_metadata({
            **chat.usage(), "candidates": out.height, "tuples": tuples.height,
            **{f"tuples_{s}": int((tuples["source"] == s).sum()) for s in SOURCES},
            **dict(sorted(status_counts(out).items())),
            **{r: int((out["reject_reason"] == r).sum()) for r in ("not_clarification", NOT_IN_LOG)},
        })
        return days

    job = dg.define_asset_job(
        JOB, selection=dg.AssetSelection.groups(GROUP), partitions_def=partitions,
        description="Ingest days of chat logs: raw turns, the prefilter and the LLM extraction (a range of days is "
                    "one run that reads every file once).")
    return dg.Definitions(assets=[raw_logs, log_candidates, log_clarifications], jobs=[job],
                          sensors=[build_sensor(params.logs, job)])
