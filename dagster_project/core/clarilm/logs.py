"""ClariLM §3.2.1 (FM-LOG data), step 1: chat logs -> one row per turn, read once for any set of days and
routed to each record's day, with a quarantine for malformed records and a ledger that reconciles read = kept + rejected; and the cheap
clarification prefilter over those turns (no LLM). The extraction of tuples is in `extraction.py`.

Files are streamed with io.records (one record at a time) and the ShareGPT / WildChat / OpenAI layouts
are io.formats.chat_logs; nothing here holds a whole log in memory.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import polars as pl

from dagster_project.config import LogsConfig
from dagster_project.io.formats.chat_logs import Conversation, Rejection, expand_paths, file_format, normalise_record
from dagster_project.io.records import QUARANTINE_SCHEMA, Quarantine, Record, count_records, iter_records

TURN_SCHEMA = {
    "conversation_id": pl.Utf8, "turn_index": pl.Int64, "role": pl.Utf8, "text": pl.Utf8, "n_chars": pl.Int64,
    "source": pl.Utf8, "source_format": pl.Utf8, "record_index": pl.Int64, "language": pl.Utf8,
    "log_model": pl.Utf8, "timestamp": pl.Datetime("us", "UTC"), "log_date": pl.Date,
}
RECORD_COLUMNS = ("conversation_id", "source", "source_format", "record_index", "language", "log_model", "timestamp",
                  "log_date")  # a turn's columns that come from its conversation
LEDGER_SCHEMA = {
    "log_date": pl.Date, "source": pl.Utf8, "source_format": pl.Utf8, "records_read": pl.Int64,
    "conversations_kept": pl.Int64, "records_rejected": pl.Int64, "file_records_read": pl.Int64,
    "file_records_counted": pl.Int64,
}


@dataclass
class ReadStats:
    """Counts that reconcile: records_read == conversations_kept + records_rejected.

    With partition days, records_read counts only those days' records; `other_dates` counts the records
    skipped because they belong to another day, and `dates` counts every record of every day.
    """

    files: dict[str, str] = field(default_factory=dict)  # path -> detected format
    records_read: int = 0
    conversations_kept: int = 0
    records_rejected: int = 0
    other_dates: int = 0
    turns: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    dates: Counter[date] = field(default_factory=Counter)  # every record by its log_date
    read_by_source: Counter[str] = field(default_factory=Counter)  # the selected days' records per file
    read_by_day: Counter[tuple[date, str]] = field(default_factory=Counter)  # (day, file) -> records read
    file_dates: dict[str, Counter[date]] = field(default_factory=dict)  # file -> records per day (every day)
    file_records: Counter[str] = field(default_factory=Counter)  # every record the reader gave, per file
    file_counted: dict[str, int] = field(default_factory=dict)  # records per file by io.records.count_records

    def as_metadata(self) -> dict[str, Any]:
        """The counts as Dagster metadata (one `rejected_<reason>` per reason seen)."""
        return {"files": len(self.files), "formats": dict(self.files), "records_read": self.records_read,
                "conversations_kept": self.conversations_kept, "records_rejected": self.records_rejected,
                "records_other_dates": self.other_dates, "turns": self.turns,
                **{f"rejected_{k}": v for k, v in sorted(self.reasons.items())}}


def _date(value: str | None) -> date | None:
    return date.fromisoformat(value) if value else None


class _DayReader:
    """Sorts the records of one read into turns and quarantine rows, counting each under its day."""

    def __init__(self, cfg: LogsConfig, days: frozenset[date] | None, stats: ReadStats):
        self.cfg, self.days, self.stats = cfg, days, stats
        self.seen: set[str] = set()
        self.records: dict[str, list[Any]] = {c: [] for c in RECORD_COLUMNS}  # one row per kept conversation
        self.turns: dict[str, list[Any]] = {"_record": [], "turn_index": [], "role": [], "text": []}
        self.quarantine = Quarantine()
        self.rejected_days: list[date] = []  # the log_date of each quarantine row, in order

    def flush(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        """The batch's turns, and its quarantine rows with their log_date as a last column."""
        rejected = self.quarantine.frame().with_columns(log_date=pl.Series(self.rejected_days, dtype=pl.Date))
        records = pl.DataFrame(self.records, schema={c: TURN_SCHEMA[c] for c in RECORD_COLUMNS})
        turns = pl.DataFrame(self.turns, schema={"_record": pl.UInt32, "turn_index": pl.Int64, "role": pl.Utf8,
                                                 "text": pl.Utf8})
        per_turn = records[turns["_record"]]  # each turn's conversation columns, gathered by position
        out = pl.concat([turns.drop("_record"), per_turn], how="horizontal").with_columns(
            n_chars=pl.col("text").str.len_chars().cast(pl.Int64)).select(list(TURN_SCHEMA))
        self.records = {c: [] for c in RECORD_COLUMNS}
        self.turns = {k: [] for k in self.turns}
        self.quarantine, self.rejected_days = Quarantine(), []
        return out, rejected

    def mine(self, rec: Record, day: date) -> bool:
        """Count the record under its day; True when it belongs to a day being read."""
        self.stats.dates[day] += 1
        self.stats.file_dates.setdefault(rec.file, Counter())[day] += 1
        if self.days is not None and day not in self.days:
            self.stats.other_dates += 1
            return False
        self.stats.records_read += 1
        self.stats.read_by_source[rec.file] += 1
        self.stats.read_by_day[day, rec.file] += 1
        return True

    def reject(self, rec: Record, reason: str, fld: str | None, detail: str | None, day: date) -> None:
        self.quarantine.add_record(rec, f"{reason}: {detail}" if detail else reason, fld)
        self.rejected_days.append(day)
        self.stats.records_rejected += 1
        self.stats.reasons[reason] = self.stats.reasons.get(reason, 0) + 1

    def keep(self, rec: Record, position: int, fmt: str, conv: Conversation, log_date: date) -> None:
        n = len(conv.turns)
        row = len(self.records["conversation_id"])
        for col, value in zip(RECORD_COLUMNS, (conv.conversation_id, rec.file, fmt, position, conv.language,
                                               conv.log_model, conv.timestamp, log_date), strict=True):
            self.records[col].append(value)
        self.turns["_record"].extend([row] * n)
        self.turns["turn_index"].extend(range(n))
        roles, texts = zip(*conv.turns, strict=True)
        self.turns["role"].extend(roles)
        self.turns["text"].extend(texts)
        self.stats.conversations_kept += 1
        self.stats.turns += n

    def take(self, rec: Record, position: int, fmt: str | None, file_date: date) -> None:
        """One record: a quarantine row (unparseable, malformed, duplicate id) or its turns."""
        if rec.problem is not None:
            reason = "wrong_type" if rec.problem == "not_an_object" else rec.problem
            if self.mine(rec, file_date):
                self.reject(rec, reason, None, rec.detail, file_date)
            return
        assert fmt is not None
        try:
            conv = normalise_record(rec.data, fmt, self.cfg.max_message_chars)
        except Rejection as r:
            if self.mine(rec, file_date):
                self.reject(rec, r.reason, r.field, r.detail, file_date)
            return
        log_date = conv.timestamp.date() if conv.timestamp else file_date
        duplicate = conv.conversation_id in self.seen
        self.seen.add(conv.conversation_id)
        if not self.mine(rec, log_date):
            return
        if duplicate:
            self.reject(rec, "duplicate_conversation_id", "id", f"conversation id {conv.conversation_id!r} seen before",
                        log_date)
        else:
            self.keep(rec, position, fmt, conv, log_date)


def _batches(paths: list[Path], cfg: LogsConfig, days: frozenset[date] | None, stats: ReadStats
             ) -> Iterator[tuple[pl.DataFrame, pl.DataFrame]]:
    """read_logs' batches, the quarantine frame with each row's log_date as a last column (for routing)."""
    reader = _DayReader(cfg, days, stats)
    in_batch = 0
    for path in paths:
        fmt: str | None = None
        file_date = _date(cfg.default_log_date) or datetime.fromtimestamp(path.stat().st_mtime, tz=UTC).date()
        for position, rec in enumerate(iter_records(path, cfg.read_batch_size)):
            in_batch += 1
            stats.file_records[rec.file] += 1
            if fmt is None and rec.problem is None:
                fmt = stats.files[rec.file] = file_format(rec)
            reader.take(rec, position, fmt, file_date)
            if in_batch >= cfg.read_batch_size:
                in_batch = 0
                yield reader.flush()
        if fmt is None:
            stats.files.setdefault(path.as_posix(), "unreadable")
        stats.file_counted[path.as_posix()] = count_records(path)  # independent of the parse above
    if in_batch or not stats.records_read:
        yield reader.flush()


def _days(day: date | Iterable[date] | None) -> frozenset[date] | None:
    return None if day is None else frozenset([day]) if isinstance(day, date) else frozenset(day)


def read_logs(paths: list[Path], cfg: LogsConfig, day: date | Iterable[date] | None = None,
              stats: ReadStats | None = None) -> Iterator[tuple[pl.DataFrame, pl.DataFrame]]:
    """Stream files -> (turns, quarantine) frames of at most logs.read_batch_size records each.

    Only one batch of Python rows is alive at a time, so memory is bounded by the batch, not the log.
    Conversation ids must be unique across all files and days (a repeat is quarantined, first one wins).
    Every record gets one log_date: its timestamp's day, else the file's date (logs.default_log_date or
    the file's mtime), which is also the day of a record rejected before its timestamp could be read.
    With `day` (one date or several), records of other days are counted in stats.other_dates and skipped.
    `record_index` is the record's 0-based position in its file; the quarantine's `record` is io.records'
    1-based number.
    """
    stats = stats if stats is not None else ReadStats()
    for turns, rejected in _batches(paths, cfg, _days(day), stats):
        yield turns, rejected.drop("log_date")


def load_logs(paths: list[Path], cfg: LogsConfig, day: date | Iterable[date] | None = None
              ) -> tuple[pl.DataFrame, pl.DataFrame, ReadStats]:
    """All batches concatenated (what the asset stores), with the read statistics."""
    stats = ReadStats()
    frames = list(read_logs(paths, cfg, day, stats))
    turns = pl.concat([t for t, _ in frames]) if frames else pl.DataFrame(schema=TURN_SCHEMA)
    rejected = pl.concat([r for _, r in frames]) if frames else pl.DataFrame(schema=QUARANTINE_SCHEMA)
    return turns, rejected, stats


def stream_days(paths: list[Path], cfg: LogsConfig, days: Iterable[date], stats: ReadStats,
                tally: DayTally | None = None) -> Iterator[tuple[date, pl.DataFrame, pl.DataFrame]]:
    """One pass over every file for several days at once: (day, turns, quarantine) pieces, one per day and read
    batch that has rows of that day, in file order. A conversation's turns are always in one piece; only a batch
    is in memory. `tally` counts each piece's kept conversations and rejected records per file (for the ledger)."""
    wanted = frozenset(days)
    for turns, rejected in _batches(paths, cfg, wanted, stats):
        by_turns = turns.partition_by("log_date", as_dict=True, maintain_order=True) if turns.height else {}
        by_rejected = rejected.partition_by("log_date", as_dict=True, maintain_order=True, include_key=False) \
            if rejected.height else {}
        for (day,) in sorted(set(by_turns) | set(by_rejected)):
            t = by_turns.get((day,), turns.clear())
            r = by_rejected.get((day,), rejected.drop("log_date").clear())
            if tally is not None:
                tally.add(day, t, r)
            yield day, t, r


def load_days(paths: list[Path], cfg: LogsConfig, days: Iterable[date]
              ) -> tuple[dict[date, tuple[pl.DataFrame, pl.DataFrame]], ReadStats]:
    """stream_days gathered per day: each day's (turns, quarantine), exactly what load_logs(paths, cfg, day) gives
    for that day alone (every day asked for is present, empty or not). Holds every day in memory."""
    wanted = sorted(frozenset(days))
    stats = ReadStats()
    pieces: dict[date, list[tuple[pl.DataFrame, pl.DataFrame]]] = {d: [] for d in wanted}
    for day, turns, rejected in stream_days(paths, cfg, wanted, stats):
        pieces[day].append((turns, rejected))
    empty = (pl.DataFrame(schema=TURN_SCHEMA), pl.DataFrame(schema=QUARANTINE_SCHEMA))
    return {d: (pl.concat([t for t, _ in ps]), pl.concat([r for _, r in ps])) if ps else empty
            for d, ps in pieces.items()}, stats


def log_dates(paths: list[Path], cfg: LogsConfig) -> Counter[date]:
    """Records per log_date over every file (one streamed pass, nothing kept): the days that have data."""
    return file_log_dates(paths, cfg)[0]


def file_log_dates(paths: list[Path], cfg: LogsConfig) -> tuple[Counter[date], dict[str, Counter[date]]]:
    """Records per log_date over every file, and per file (one streamed pass, nothing kept)."""
    stats = ReadStats()
    for _ in _batches(paths, cfg, frozenset(), stats):
        pass
    return stats.dates, stats.file_dates


def in_window(cfg: LogsConfig, days: Iterable[date]) -> list[date]:
    """The days within logs.date_from / date_to (inclusive; null: unbounded), sorted."""
    lo, hi = _date(cfg.date_from), _date(cfg.date_to)
    return sorted(d for d in set(days) if (lo is None or d >= lo) and (hi is None or d <= hi))


def days_to_ingest(cfg: LogsConfig) -> tuple[list[str], Counter[date]]:
    """The days that have records within logs.date_from / date_to (ISO keys, sorted), and every day's count."""
    counts = log_dates(expand_paths(cfg.paths), cfg)
    return [d.isoformat() for d in in_window(cfg, counts)], counts


@dataclass
class DayTally:
    """Conversations kept and records rejected per (day, file), counted from the rows as they are stored."""

    kept: Counter[tuple[date, str]] = field(default_factory=Counter)
    rejected: Counter[tuple[date, str]] = field(default_factory=Counter)

    def add(self, day: date, turns: pl.DataFrame, rejected: pl.DataFrame) -> None:
        """Count one piece of a day (a conversation is never split across pieces, so counts add up)."""
        for src, n in turns.group_by("source").agg(pl.col("record_index").n_unique()).iter_rows():
            self.kept[day, src] += n
        for src, n in rejected.group_by("file").len().iter_rows():
            self.rejected[day, src] += n


def ledger(stats: ReadStats, day: date, turns: pl.DataFrame, rejected: pl.DataFrame) -> pl.DataFrame:
    """One row per file for one day: records read (counted while streaming) beside what was kept and
    rejected, so a check can prove read = kept + rejected from the stored rows; and the file's records as the
    reader gave them (every day) beside a count made without parsing, so a reader that loses records shows."""
    tally = DayTally()
    tally.add(day, turns, rejected)
    return tally_ledger(stats, day, tally)


def tally_ledger(stats: ReadStats, day: date, tally: DayTally) -> pl.DataFrame:
    """`ledger` of one day from the counts a DayTally took while the day's rows were streamed to storage."""
    rows = [{"log_date": day, "source": src, "source_format": stats.files.get(src), "records_read": n,
             "conversations_kept": tally.kept.get((day, src), 0), "records_rejected": tally.rejected.get((day, src), 0),
             "file_records_read": stats.file_records.get(src, 0), "file_records_counted": stats.file_counted.get(src)}
            for (d, src), n in sorted(stats.read_by_day.items()) if d == day]
    return pl.DataFrame(rows, schema=LEDGER_SCHEMA)


# --------------------------------------------------------------------------- prefilter (no LLM)

# FM-LOG mines two signals, recorded per row as `source`:
#  - user_refinement (the paper's, §3.2.1): two consecutive user questions of a session, where the later
#    one may refine the earlier; the LLM writes the clarifying question c and the facet f itself.
#  - assistant_asked (this project's second source): the logged assistant turn asked the user something and
#    the user answered; c is the logged question.
SOURCES = ("user_refinement", "assistant_asked")

# A question addressed to the user: a sentence with "you/your" that ends in "?", or one that asks "which/what
# kind of ..." (the usual shapes of a clarifying question).
ADDRESSED_RE = r"(?i)(\b(you|your|you're|you'd|yours)\b[^.!?\n]*\?)|(\b(which|what kind of|what type of)\b[^.!?\n]*\?)"
PREFILTER_REASONS = ("no_preceding_user_turn", "no_user_reply", "too_long", "no_question", "not_addressed_to_user",
                     "repeated_question")
CANDIDATE_COLUMNS = ("candidate_id", "conversation_id", "turn_index", "source", "kept", "reject_reason", "query",
                     "clarifying_question", "reply", "asks_user", "log_file", "source_format", "language", "log_date")


def asks_user(text: pl.Expr, max_chars: int | None = 300) -> pl.Expr:
    """An assistant turn with a question addressed to the user, at most max_chars long (None: any length)."""
    short = pl.lit(True) if max_chars is None else text.str.len_chars() <= max_chars
    return short & text.str.contains("?", literal=True) & text.str.contains(ADDRESSED_RE)


def _lazy(turns: pl.LazyFrame | pl.DataFrame) -> pl.LazyFrame:
    return turns.lazy() if isinstance(turns, pl.DataFrame) else turns


def assistant_asked(turns: pl.LazyFrame | pl.DataFrame, max_chars: int | None = 300) -> pl.LazyFrame:
    """One row per assistant turn, `kept` when it looks like a clarifying question (source assistant_asked).

    Kept: the previous turn is the user's query (q_i), the next turn is a user reply (q_{i+1}), the
    assistant turn is at most `max_chars` long (None: no limit), contains a question mark and addresses the
    user. `reject_reason` names the first rule that failed (in PREFILTER_REASONS order); `asks_user` says
    whether the turn asks the user something whatever its length (what the length limit drops is
    `too_long & asks_user`). Texts are kept only for kept rows; the rest join back to raw_logs on
    (conversation_id, turn_index).
    """
    conv = "conversation_id"
    lf = _lazy(turns).sort(conv, "turn_index").with_columns(
        prev_role=pl.col("role").shift(1).over(conv), prev_text=pl.col("text").shift(1).over(conv),
        next_role=pl.col("role").shift(-1).over(conv), next_text=pl.col("text").shift(-1).over(conv),
    ).filter(pl.col("role") == "assistant")
    text = pl.col("text")
    too_long = pl.lit(False) if max_chars is None else text.str.len_chars() > max_chars
    reason = (
        pl.when(pl.col("prev_role").fill_null("") != "user").then(pl.lit("no_preceding_user_turn"))
        .when(pl.col("next_role").fill_null("") != "user").then(pl.lit("no_user_reply"))
        .when(too_long).then(pl.lit("too_long"))
        .when(~text.str.contains("?", literal=True)).then(pl.lit("no_question"))
        .when(~text.str.contains(ADDRESSED_RE)).then(pl.lit("not_addressed_to_user"))
        .otherwise(pl.lit(None, pl.Utf8))
    )
    kept = pl.col("reject_reason").is_null()
    return lf.with_columns(reject_reason=reason).with_columns(kept=kept).select(
        pl.format("{}:{}", pl.col(conv), pl.col("turn_index")).alias("candidate_id"),
        conv, "turn_index", pl.lit("assistant_asked").alias("source"), "kept", "reject_reason",
        pl.when(kept).then(pl.col("prev_text")).alias("query"),
        pl.when(kept).then(text).alias("clarifying_question"),
        pl.when(kept).then(pl.col("next_text")).alias("reply"),
        asks_user(text, None).alias("asks_user"),
        pl.col("source").alias("log_file"), "source_format", "language", "log_date",
    )


def _norm(text: pl.Expr) -> pl.Expr:
    return text.str.to_lowercase().str.replace_all(r"[^\p{L}\p{N}]+", " ").str.strip_chars()


def user_refinements(turns: pl.LazyFrame | pl.DataFrame) -> pl.LazyFrame:
    """One row per pair of consecutive user questions (q_i, q_{i+1}) of a session (source user_refinement).

    Every pair goes to the LLM, which decides whether q_{i+1} refines q_i (ClariLM §3.2.1), except a
    repeat of the same question (a re-send: `repeated_question`). `turn_index` is q_{i+1}'s turn;
    `clarifying_question` holds the logged assistant turn between the two when there is one (for reference:
    the LLM writes c itself).
    """
    conv = "conversation_id"
    lf = _lazy(turns).sort(conv, "turn_index").with_columns(
        between=pl.when(pl.col("role").shift(-1).over(conv) == "assistant").then(pl.col("text").shift(-1).over(conv)))
    users = lf.filter(pl.col("role") == "user").with_columns(
        next_text=pl.col("text").shift(-1).over(conv), next_turn=pl.col("turn_index").shift(-1).over(conv),
    ).filter(pl.col("next_turn").is_not_null())
    reason = pl.when(_norm(pl.col("text")) == _norm(pl.col("next_text"))).then(pl.lit("repeated_question")) \
        .otherwise(pl.lit(None, pl.Utf8))
    kept = pl.col("reject_reason").is_null()
    return users.with_columns(reject_reason=reason).with_columns(kept=kept).select(
        pl.format("{}:{}>{}", pl.col(conv), pl.col("turn_index"), pl.col("next_turn")).alias("candidate_id"),
        conv, pl.col("next_turn").alias("turn_index"), pl.lit("user_refinement").alias("source"), "kept",
        "reject_reason", pl.when(kept).then(pl.col("text")).alias("query"),
        pl.when(kept).then(pl.col("between")).alias("clarifying_question"),
        pl.when(kept).then(pl.col("next_text")).alias("reply"), pl.lit(None, pl.Boolean).alias("asks_user"),
        pl.col("source").alias("log_file"), "source_format", "language", "log_date",
    )


def prefilter(turns: pl.LazyFrame | pl.DataFrame, max_chars: int | None = 300,
              sources: tuple[str, ...] | list[str] = SOURCES) -> pl.LazyFrame:
    """FM-LOG step 1, the candidates of every source in `sources` (see SOURCES), one table with `source`.

    Lazy polars expressions: runs streaming over millions of turns.
    """
    parts = [user_refinements(turns) if s == "user_refinement" else assistant_asked(turns, max_chars)
             for s in SOURCES if s in sources]
    return pl.concat(parts, how="vertical") if parts else assistant_asked(turns, max_chars).clear()


@dataclass
class CandidateCounts:
    """The prefilter's counts summed over the pieces of a streamed run (what log_candidates reports)."""

    turns: int = 0
    rows: int = 0
    kept: Counter[str] = field(default_factory=Counter)  # per source
    reasons: Counter[str] = field(default_factory=Counter)
    dropped_by_length: int = 0

    def add(self, turns: int, out: pl.DataFrame) -> None:
        """Count one piece: `turns` prefiltered into the candidate rows `out`."""
        self.turns += turns
        self.rows += out.height
        self.kept.update(dict(out.filter(pl.col("kept")).group_by("source").len().iter_rows()))
        self.reasons.update(dict(out.group_by("reject_reason").len().drop_nulls().iter_rows()))
        self.dropped_by_length += dropped_by_length(out)

    def as_metadata(self) -> dict[str, Any]:
        candidates = sum(self.kept.values())
        return {"rows": self.rows, "candidates": candidates,
                "pass_rate": round(candidates / self.rows, 4) if self.rows else 0.0,
                **{f"candidates_{s}": self.kept.get(s, 0) for s in SOURCES},
                "dropped_by_length": self.dropped_by_length,
                **{f"rejected_{r}": self.reasons.get(r, 0) for r in PREFILTER_REASONS}}


def pass_rate(candidates: pl.DataFrame) -> float:
    """Share of candidates the prefilter keeps."""
    return float(candidates["kept"].mean()) if candidates.height else 0.0


def dropped_by_length(candidates: pl.DataFrame) -> int:
    """Assistant turns that ask the user something but were rejected only for being over the length limit."""
    if not candidates.height:
        return 0
    return int(((candidates["reject_reason"] == "too_long") & candidates["asks_user"].fill_null(False)).sum())
