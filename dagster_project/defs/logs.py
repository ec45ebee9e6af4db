"""Group `logs` (ClariLM §3.2.1): chat logs -> one row per turn, the clarification prefilter, LLM extraction.

raw_logs is not partitioned yet: the warehouse IO manager writes one Parquet file per asset. Every turn
carries `log_date` (from the record's timestamp, else logs.default_log_date), and logs.date_from /
logs.date_to restrict a run to a date range (records outside it land in raw_logs_rejected).
"""

import datetime as dt
import time

import dagster as dg
import polars as pl

from dagster_project.core.logs import (
    PREFILTER_REASONS,
    LogReadConfig,
    expand_paths,
    extraction_requests,
    load_logs,
    parse_extractions,
    pass_rate,
    prefilter,
    skipped_extractions,
)
from dagster_project.resources.llm import LLMResource
from dagster_project.resources.params import ParamsResource

GROUP = "logs"


def _date(value: str | None) -> dt.date | None:
    return dt.date.fromisoformat(value) if value else None


@dg.multi_asset(
    group_name=GROUP,
    outs={
        "raw_logs": dg.AssetOut(key=[GROUP, "raw_logs"], kinds={"polars"},
                                description="One row per turn of every well-formed conversation in logs.paths."),
        "raw_logs_rejected": dg.AssetOut(key=[GROUP, "raw_logs_rejected"], kinds={"polars"},
                                         description="Malformed log records, one row each, with reason and field."),
    },
)
def raw_logs(context: dg.AssetExecutionContext, params: ParamsResource):
    """Read every file in logs.paths (format detected per file, streamed), quarantine malformed records."""
    cfg = params.load().logs
    t0 = time.monotonic()
    paths = expand_paths(cfg.paths)
    turns, rejected, stats = load_logs(paths, LogReadConfig(
        max_message_chars=cfg.max_message_chars, default_log_date=_date(cfg.default_log_date),
        date_from=_date(cfg.date_from), date_to=_date(cfg.date_to), batch_size=cfg.read_batch_size))
    meta = stats.as_metadata() | {"read_s": round(time.monotonic() - t0, 3),
                                  "log_dates": dg.MetadataValue.json(
                                      {str(d): n for d, n in turns.group_by("log_date").len().sort("log_date")
                                       .iter_rows()})}
    context.log.info(f"logs: {stats.records_read} records read, {stats.conversations_kept} kept, "
                     f"{stats.records_rejected} rejected, {stats.turns} turns")
    yield dg.Output(turns, output_name="raw_logs", metadata=meta)
    yield dg.Output(rejected, output_name="raw_logs_rejected",
                    metadata={"records_read": stats.records_read, "records_rejected": stats.records_rejected})


@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"},
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


@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"},
          ins={"log_candidates": dg.AssetIn(key=[GROUP, "log_candidates"])})
def log_clarifications(context: dg.AssetExecutionContext, params: ParamsResource, llm: LLMResource,
                       log_candidates: pl.DataFrame) -> pl.DataFrame:
    """(q_i, c, q_{i+1}, f) tuples: the extractor judges each kept candidate with few-shot demonstrations."""
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
