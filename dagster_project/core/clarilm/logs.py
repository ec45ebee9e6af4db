"""ClariLM §3.2.1 (FM-LOG data): chat-log normalisation, the cheap clarification prefilter, and the
extraction of (q_i, c, q_{i+1}, f) tuples from candidate exchanges.

Pure Python: files are read here only as streams of records handed in by path; no Dagster, no model.

Supported inputs, detected per file from its first recognisable record (gzip accepted for JSON/JSONL):
- ShareGPT: ``{"id", "conversations": [{"from": "human"|"gpt"|"system", "value"}]}`` (JSON array or JSONL)
- WildChat: ``{"conversation_hash", "timestamp", "language", "conversation": [{"role", "content"}]}``
- OpenAI chat: ``{"id"?, "messages": [{"role", "content"}]}``
- Parquet files with any of the three field layouts.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import glob
import gzip
import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import polars as pl

from dagster_project.llm.chat import ChatRequest, ChatResult
from dagster_project.llm.parsing import parse_json_object
from dagster_project.llm.prompts import load_prompt

# --------------------------------------------------------------------------- formats and schemas

FORMAT_KEYS = {"sharegpt": "conversations", "wildchat": "conversation", "openai": "messages"}
ROLE_MAP = {
    "human": "user", "user": "user",
    "gpt": "assistant", "chatgpt": "assistant", "assistant": "assistant", "bard": "assistant", "bing": "assistant",
    "model": "assistant",
    "system": "system",
}
ID_KEYS = {"sharegpt": ("id", "conversation_id"), "wildchat": ("conversation_hash", "conversation_id", "id"),
           "openai": ("id", "conversation_id")}
TIME_KEYS = ("timestamp", "created_at", "create_time", "created")
LANGUAGE_KEYS = ("language", "lang")
SUFFIXES = (".json", ".jsonl", ".ndjson", ".json.gz", ".jsonl.gz", ".ndjson.gz", ".parquet")

REJECT_REASONS = (
    "invalid_json", "not_utf8", "wrong_type", "missing_field", "missing_role", "unknown_role", "empty_text",
    "oversized_message", "no_user_turn", "duplicate_conversation_id",
)

TURN_SCHEMA = {
    "conversation_id": pl.Utf8, "turn_index": pl.Int64, "role": pl.Utf8, "text": pl.Utf8, "n_chars": pl.Int64,
    "source": pl.Utf8, "source_format": pl.Utf8, "record_index": pl.Int64, "language": pl.Utf8,
    "log_model": pl.Utf8, "timestamp": pl.Datetime("us", "UTC"), "log_date": pl.Date,
}
REJECT_SCHEMA = {
    "source": pl.Utf8, "record_index": pl.Int64, "conversation_id": pl.Utf8, "reason": pl.Utf8,
    "field": pl.Utf8, "detail": pl.Utf8, "raw": pl.Utf8, "log_date": pl.Date,
}
LEDGER_SCHEMA = {
    "log_date": pl.Date, "source": pl.Utf8, "source_format": pl.Utf8, "records_read": pl.Int64,
    "conversations_kept": pl.Int64, "records_rejected": pl.Int64,
}
RAW_SNIPPET = 500


class LogFormatError(ValueError):
    """A log file that cannot be read at all (unknown layout, unsupported suffix); names the file."""


@dataclass
class RawRecord:
    """One record as read from a file: the parsed object, or why it could not be parsed."""

    source: str
    index: int
    obj: Any = None
    reason: str | None = None
    detail: str | None = None
    raw: str = ""


@dataclass
class Rejection(Exception):
    reason: str
    field: str | None
    detail: str


@dataclass
class ReadStats:
    """Counts that reconcile: records_read == conversations_kept + records_rejected.

    With a partition date, records_read counts only that day's records; `other_dates` counts the records
    skipped because they belong to another day, and `dates` counts every record of every day.
    """

    files: dict[str, str] = field(default_factory=dict)  # path -> detected format
    records_read: int = 0
    conversations_kept: int = 0
    records_rejected: int = 0
    other_dates: int = 0
    turns: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    dates: Counter[dt.date] = field(default_factory=Counter)  # every record by its log_date
    read_by_source: Counter[str] = field(default_factory=Counter)  # this day's records per file

    def as_metadata(self) -> dict[str, Any]:
        return {"files": len(self.files), "formats": dict(self.files), "records_read": self.records_read,
                "conversations_kept": self.conversations_kept, "records_rejected": self.records_rejected,
                "records_other_dates": self.other_dates, "turns": self.turns,
                **{f"rejected_{k}": v for k, v in sorted(self.reasons.items())}}


# --------------------------------------------------------------------------- reading files as record streams

def expand_paths(patterns: Iterable[str], root: str | Path = ".") -> list[Path]:
    """Glob patterns (relative to root) -> sorted unique files; a pattern matching nothing is an error."""
    out: list[Path] = []
    for pat in patterns:
        full = pat if Path(pat).is_absolute() else str(Path(root) / pat)
        hits = sorted(Path(p) for p in glob.glob(full, recursive=True) if Path(p).is_file())
        if not hits:
            raise LogFormatError(f"logs.paths: pattern {pat!r} matched no files (relative to {Path(root).resolve()})")
        for h in hits:
            if not h.name.lower().endswith(SUFFIXES):
                raise LogFormatError(f"{h}: unsupported file type; supported: {', '.join(SUFFIXES)}")
            if h not in out:
                out.append(h)
    return out


def _open_binary(path: Path) -> IO[bytes]:
    return gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")


def _first_char(path: Path) -> str:
    with _open_binary(path) as f:
        head = f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    return head[:1].decode("ascii", "replace")


def _jsonl_records(path: Path, source: str) -> Iterator[RawRecord]:
    with _open_binary(path) as f:
        index = -1
        for line in f:
            if not line.strip():
                continue
            index += 1
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as e:
                yield RawRecord(source, index, reason="not_utf8", detail=f"byte {e.start}: {e.reason}",
                                raw=line[:RAW_SNIPPET].decode("utf-8", "replace"))
                continue
            try:
                yield RawRecord(source, index, obj=json.loads(text), raw=text[:RAW_SNIPPET])
            except json.JSONDecodeError as e:
                yield RawRecord(source, index, reason="invalid_json", detail=f"{e.msg} at char {e.pos}",
                                raw=text[:RAW_SNIPPET])


def _json_array_records(path: Path, source: str) -> Iterator[RawRecord]:
    """Stream the items of a top-level JSON array (ijson: constant memory, whatever the file size)."""
    import ijson

    index = -1
    with _open_binary(path) as f:
        try:
            for index, obj in enumerate(ijson.items(f, "item", use_float=True), start=0):
                yield RawRecord(source, index, obj=obj, raw=json.dumps(obj, ensure_ascii=False)[:RAW_SNIPPET])
        except (ijson.JSONError, UnicodeDecodeError) as e:  # the rest of the array is unreadable
            reason = "not_utf8" if isinstance(e, UnicodeDecodeError) else "invalid_json"
            yield RawRecord(source, index + 1, reason=reason,
                            detail=f"array unreadable from item {index + 1} on: {str(e)[:200]}")


def _parquet_records(path: Path, source: str, batch_size: int) -> Iterator[RawRecord]:
    import pyarrow.parquet as pq

    index = -1
    for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_size):
        for obj in batch.to_pylist():
            index += 1
            yield RawRecord(source, index, obj=obj, raw=json.dumps(obj, ensure_ascii=False, default=str)[:RAW_SNIPPET])


def iter_records(path: Path, batch_size: int = 10_000) -> Iterator[RawRecord]:
    """Records of one file, one at a time: JSONL line by line, JSON arrays item by item, Parquet by row group."""
    source = path.as_posix()
    name = path.name.lower()
    if name.endswith(".parquet"):
        yield from _parquet_records(path, source, batch_size)
    elif _first_char(path) == "[":
        yield from _json_array_records(path, source)
    else:  # JSONL, or a .json file holding one object per line
        yield from _jsonl_records(path, source)


def detect_format(obj: Any) -> str | None:
    """'sharegpt' | 'wildchat' | 'openai' from the record's keys, or None."""
    if isinstance(obj, dict):
        for fmt, key in FORMAT_KEYS.items():
            if key in obj:
                return fmt
    return None


# --------------------------------------------------------------------------- one record -> turns or a rejection

def _parse_time(value: Any) -> dt.datetime | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC)
    if isinstance(value, int | float) and not isinstance(value, bool):
        secs = value / 1000 if value > 1e11 else value  # epoch milliseconds or seconds
        return dt.datetime.fromtimestamp(secs, tz=dt.UTC)
    if isinstance(value, str):
        parsed = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
    raise TypeError(type(value).__name__)


def _content_id(turns: list[tuple[str, str]]) -> str:
    digest = hashlib.sha1("\x1e".join(f"{r}\x1f{t}" for r, t in turns).encode()).hexdigest()
    return f"h-{digest[:16]}"


def normalise_record(obj: Any, fmt: str, max_chars: int) -> dict[str, Any]:
    """Validate one conversation record; return its fields, or raise Rejection(reason, field, detail)."""
    if not isinstance(obj, dict):
        raise Rejection("wrong_type", None, f"record is a {type(obj).__name__}, expected an object")
    key = FORMAT_KEYS[fmt]
    if key not in obj:
        raise Rejection("missing_field", key, f"no {key!r} list (file detected as {fmt})")
    raw_turns = obj[key]
    if not isinstance(raw_turns, list):
        raise Rejection("wrong_type", key, f"{key!r} is a {type(raw_turns).__name__}, expected a list")
    role_key, text_key = ("from", "value") if fmt == "sharegpt" else ("role", "content")
    turns: list[tuple[str, str]] = []
    for i, t in enumerate(raw_turns):
        where = f"{key}[{i}]"
        if not isinstance(t, dict):
            raise Rejection("wrong_type", where, f"turn is a {type(t).__name__}, expected an object")
        role = t.get(role_key)
        if role is None:
            raise Rejection("missing_role", f"{where}.{role_key}", "turn has no role")
        if not isinstance(role, str):
            raise Rejection("wrong_type", f"{where}.{role_key}", f"role is a {type(role).__name__}")
        if role.strip().lower() not in ROLE_MAP:
            raise Rejection("unknown_role", f"{where}.{role_key}", f"role {role!r}; known: {sorted(ROLE_MAP)}")
        text = t.get(text_key)
        if text is None:
            raise Rejection("missing_field", f"{where}.{text_key}", "turn has no text")
        if not isinstance(text, str):
            raise Rejection("wrong_type", f"{where}.{text_key}", f"text is a {type(text).__name__}, expected a string")
        if not text.strip():
            raise Rejection("empty_text", f"{where}.{text_key}", "text is empty or whitespace")
        if len(text) > max_chars:
            raise Rejection("oversized_message", f"{where}.{text_key}",
                            f"{len(text)} characters > logs.max_message_chars={max_chars}")
        turns.append((ROLE_MAP[role.strip().lower()], text))
    if not any(r == "user" for r, _ in turns):
        raise Rejection("no_user_turn", key, f"{len(turns)} turns, none from the user")
    cid = next((obj[k] for k in ID_KEYS[fmt] if obj.get(k) not in (None, "")), None)
    if cid is not None and not isinstance(cid, str | int):
        raise Rejection("wrong_type", "id", f"conversation id is a {type(cid).__name__}")
    ts_key = next((k for k in TIME_KEYS if obj.get(k) is not None), None)
    try:
        ts = _parse_time(obj[ts_key]) if ts_key else None
    except (TypeError, ValueError, OverflowError, OSError) as e:
        raise Rejection("wrong_type", ts_key, f"unreadable timestamp {obj[ts_key]!r}: {e}") from None
    lang = next((obj[k] for k in LANGUAGE_KEYS if isinstance(obj.get(k), str) and obj[k].strip()), None)
    model = obj.get("model") if isinstance(obj.get("model"), str) else None
    return {"conversation_id": str(cid) if cid is not None else _content_id(turns), "turns": turns,
            "timestamp": ts, "language": lang, "log_model": model}


@dataclass
class LogReadConfig:
    max_message_chars: int = 20_000
    default_log_date: dt.date | None = None  # for records without a timestamp; None -> file modification date
    partition_date: dt.date | None = None  # read only this day's records (a daily partition); None: all days
    batch_size: int = 10_000  # conversations per yielded frame


def _turn_rows(rec: RawRecord, fmt: str, conv: dict[str, Any], log_date: dt.date) -> list[dict[str, Any]]:
    return [{"conversation_id": conv["conversation_id"], "turn_index": i, "role": role, "text": text,
             "n_chars": len(text), "source": rec.source, "source_format": fmt, "record_index": rec.index,
             "language": conv["language"], "log_model": conv["log_model"], "timestamp": conv["timestamp"],
             "log_date": log_date} for i, (role, text) in enumerate(conv["turns"])]


def read_logs(paths: list[Path], cfg: LogReadConfig, stats: ReadStats | None = None
              ) -> Iterator[tuple[pl.DataFrame, pl.DataFrame]]:
    """Stream files -> (turns, rejected) frames of at most cfg.batch_size records each.

    Only one batch of Python rows is alive at a time, so memory is bounded by the batch, not the log.
    Conversation ids must be unique across all files and days (a repeat is quarantined, first one wins).
    Every record gets one log_date: its timestamp's day, else the file's date (logs.default_log_date or
    the file's mtime), which is also the day of a record rejected before its timestamp could be read.
    With cfg.partition_date, records of other days are counted in stats.other_dates and skipped.
    """
    stats = stats if stats is not None else ReadStats()
    seen: set[str] = set()
    turns: list[dict[str, Any]] = []
    rejected: list[dict[str, Any]] = []
    in_batch = 0

    def flush() -> tuple[pl.DataFrame, pl.DataFrame]:
        nonlocal turns, rejected, in_batch
        out = (pl.DataFrame(turns, schema=TURN_SCHEMA), pl.DataFrame(rejected, schema=REJECT_SCHEMA))
        turns, rejected, in_batch = [], [], 0
        return out

    def mine(rec: RawRecord, day: dt.date) -> bool:
        """Count the record under its day; True when it belongs to the day being read."""
        stats.dates[day] += 1
        if cfg.partition_date is not None and day != cfg.partition_date:
            stats.other_dates += 1
            return False
        stats.records_read += 1
        stats.read_by_source[rec.source] += 1
        return True

    def reject(rec: RawRecord, reason: str, fld: str | None, detail: str, day: dt.date,
               cid: str | None = None) -> None:
        rejected.append({"source": rec.source, "record_index": rec.index, "conversation_id": cid,
                         "reason": reason, "field": fld, "detail": detail, "raw": rec.raw, "log_date": day})
        stats.records_rejected += 1
        stats.reasons[reason] = stats.reasons.get(reason, 0) + 1

    for path in paths:
        fmt: str | None = None
        file_date = cfg.default_log_date or dt.datetime.fromtimestamp(path.stat().st_mtime, tz=dt.UTC).date()
        for rec in iter_records(path, cfg.batch_size):
            in_batch += 1
            if fmt is None and rec.reason is None:
                fmt = detect_format(rec.obj)
                if fmt is None:
                    keys = sorted(rec.obj)[:10] if isinstance(rec.obj, dict) else type(rec.obj).__name__
                    raise LogFormatError(
                        f"{path}: record {rec.index}: cannot tell the log format; expected a field "
                        f"'conversations' (ShareGPT), 'conversation' (WildChat) or 'messages' (OpenAI), got {keys}")
                stats.files[path.as_posix()] = fmt
            if rec.reason is not None:
                if mine(rec, file_date):
                    reject(rec, rec.reason, None, rec.detail or "", file_date)
            else:
                assert fmt is not None
                try:
                    conv = normalise_record(rec.obj, fmt, cfg.max_message_chars)
                except Rejection as r:
                    cid = rec.obj.get(ID_KEYS[fmt][0]) if isinstance(rec.obj, dict) else None
                    if mine(rec, file_date):
                        reject(rec, r.reason, r.field, r.detail, file_date, str(cid) if cid is not None else None)
                else:
                    cid = conv["conversation_id"]
                    log_date = conv["timestamp"].date() if conv["timestamp"] else file_date
                    duplicate = cid in seen
                    seen.add(cid)
                    ours = mine(rec, log_date)
                    if ours and duplicate:
                        reject(rec, "duplicate_conversation_id", "id", f"conversation id {cid!r} seen before",
                               log_date, cid)
                    elif ours:
                        rows = _turn_rows(rec, fmt, conv, log_date)
                        turns.extend(rows)
                        stats.conversations_kept += 1
                        stats.turns += len(rows)
            if in_batch >= cfg.batch_size:
                yield flush()
        if fmt is None and path.as_posix() not in stats.files:
            stats.files[path.as_posix()] = "unreadable"
    if in_batch or not stats.records_read:
        yield flush()


def load_logs(paths: list[Path], cfg: LogReadConfig) -> tuple[pl.DataFrame, pl.DataFrame, ReadStats]:
    """All batches concatenated (what the asset stores), with the read statistics."""
    stats = ReadStats()
    frames = list(read_logs(paths, cfg, stats))
    turns = pl.concat([t for t, _ in frames]) if frames else pl.DataFrame(schema=TURN_SCHEMA)
    rejected = pl.concat([r for _, r in frames]) if frames else pl.DataFrame(schema=REJECT_SCHEMA)
    return turns, rejected, stats


def log_dates(paths: list[Path], cfg: LogReadConfig) -> Counter[dt.date]:
    """Records per log_date over every file (one streamed pass, nothing kept): the days that have data."""
    stats = ReadStats()
    for _ in read_logs(paths, dataclasses.replace(cfg, partition_date=None), stats):
        pass
    return stats.dates


def ledger(stats: ReadStats, day: dt.date, turns: pl.DataFrame, rejected: pl.DataFrame) -> pl.DataFrame:
    """One row per file for one day: records read (counted while streaming) beside what was kept and
    rejected, so a check can prove read = kept + rejected from the stored rows."""
    kept = dict(turns.group_by("source").agg(pl.col("record_index").n_unique()).iter_rows())
    rej = dict(rejected.group_by("source").len().iter_rows())
    rows = [{"log_date": day, "source": src, "source_format": stats.files.get(src), "records_read": n,
             "conversations_kept": kept.get(src, 0), "records_rejected": rej.get(src, 0)}
            for src, n in sorted(stats.read_by_source.items())]
    return pl.DataFrame(rows, schema=LEDGER_SCHEMA)


# --------------------------------------------------------------------------- prefilter (no LLM)

# A question addressed to the user: a sentence with "you/your" that ends in "?", or one that asks "which/what
# kind of ..." (the usual shapes of a clarifying question).
ADDRESSED_RE = r"(?i)(\b(you|your|you're|you'd|yours)\b[^.!?\n]*\?)|(\b(which|what kind of|what type of)\b[^.!?\n]*\?)"
PREFILTER_REASONS = ("no_preceding_user_turn", "no_user_reply", "too_long", "no_question", "not_addressed_to_user")


def asks_user(text: pl.Expr, max_chars: int = 300) -> pl.Expr:
    """A short assistant turn with a question addressed to the user (the prefilter's text rules)."""
    return (text.str.len_chars() <= max_chars) & text.str.contains("?", literal=True) & text.str.contains(ADDRESSED_RE)


def prefilter(turns: pl.LazyFrame | pl.DataFrame, max_chars: int = 300) -> pl.LazyFrame:
    """One row per assistant turn, `kept` when it looks like a clarifying question (ClariLM FM-LOG step 1).

    Kept: the previous turn is the user's query (q_i), the next turn is a user reply (q_{i+1}), the
    assistant turn is at most `max_chars` long, contains a question mark and addresses the user.
    `reject_reason` names the first rule that failed (in PREFILTER_REASONS order). Texts are kept only
    for kept rows; the rest join back to raw_logs on (conversation_id, turn_index).
    Lazy polars expressions: runs streaming over millions of turns.
    """
    lf = turns.lazy() if isinstance(turns, pl.DataFrame) else turns
    conv = "conversation_id"
    lf = lf.sort(conv, "turn_index").with_columns(
        prev_role=pl.col("role").shift(1).over(conv), prev_text=pl.col("text").shift(1).over(conv),
        next_role=pl.col("role").shift(-1).over(conv), next_text=pl.col("text").shift(-1).over(conv),
    ).filter(pl.col("role") == "assistant")
    text = pl.col("text")
    reason = (
        pl.when(pl.col("prev_role").fill_null("") != "user").then(pl.lit("no_preceding_user_turn"))
        .when(pl.col("next_role").fill_null("") != "user").then(pl.lit("no_user_reply"))
        .when(text.str.len_chars() > max_chars).then(pl.lit("too_long"))
        .when(~text.str.contains("?", literal=True)).then(pl.lit("no_question"))
        .when(~text.str.contains(ADDRESSED_RE)).then(pl.lit("not_addressed_to_user"))
        .otherwise(pl.lit(None, pl.Utf8))
    )
    kept = pl.col("reject_reason").is_null()
    return lf.with_columns(reject_reason=reason).with_columns(kept=kept).select(
        pl.format("{}:{}", pl.col(conv), pl.col("turn_index")).alias("candidate_id"),
        conv, "turn_index", "kept", "reject_reason",
        pl.when(kept).then(pl.col("prev_text")).alias("query"),
        pl.when(kept).then(text).alias("clarifying_question"),
        pl.when(kept).then(pl.col("next_text")).alias("reply"),
        "source", "source_format", "language", "log_date",
    )


def pass_rate(candidates: pl.DataFrame) -> float:
    return float(candidates["kept"].mean()) if candidates.height else 0.0


# --------------------------------------------------------------------------- LLM extraction of (q_i, c, q_{i+1}, f)

EXTRACTION_SCHEMA = {
    "type": "object",
    "properties": {
        "is_clarification": {"type": "boolean"},
        "query": {"type": "string", "maxLength": 300},
        "clarifying_question": {"type": "string", "maxLength": 300},
        "refined_query": {"type": "string", "maxLength": 300},
        "facet": {"type": "string", "maxLength": 80},
    },
    "required": ["is_clarification", "query", "clarifying_question", "refined_query", "facet"],
}
EXTRACTION_PROMPT = "clarilm_extract_clarification"


def _clip(text: str, limit: int = 1200) -> str:
    return text if len(text) <= limit else text[:limit] + " ..."


def extraction_requests(candidates: pl.DataFrame, temperature: float = 0.0, max_tokens: int = 256) -> list[ChatRequest]:
    """One request per kept candidate; the prompt file holds the 3 positive and 4 negative demonstrations."""
    prompt = load_prompt(EXTRACTION_PROMPT)
    return [ChatRequest.of(prompt.messages(query=_clip(r["query"]), assistant_turn=_clip(r["clarifying_question"]),
                                           reply=_clip(r["reply"])),
                           prompt.version, EXTRACTION_SCHEMA, temperature=temperature, max_tokens=max_tokens)
            for r in candidates.iter_rows(named=True)]


EXTRACTION_COLUMNS = {
    "candidate_id": pl.Utf8, "conversation_id": pl.Utf8, "turn_index": pl.Int64,
    "is_clarification": pl.Boolean, "q_i": pl.Utf8, "c": pl.Utf8, "q_next": pl.Utf8, "facet": pl.Utf8,
    "filled_from_log": pl.List(pl.Utf8), "kept": pl.Boolean, "reject_reason": pl.Utf8,
    "status": pl.Utf8, "error": pl.Utf8, "raw_output": pl.Utf8, "model": pl.Utf8, "prompt_version": pl.Utf8,
    "source": pl.Utf8, "log_date": pl.Date,
}


def parse_extraction(candidate: dict[str, Any], raw: str | None) -> dict[str, Any]:
    """One reply -> tuple fields and status. Never raises.

    - garbage (no JSON object, or `is_clarification` not a boolean) -> parse_error
    - is_clarification false -> ok, not kept (reject_reason not_clarification)
    - is_clarification true but no facet -> parse_error (a tuple without f is unusable)
    - true with empty q_i / c / q_{i+1} -> ok; the logged text fills the gap (listed in filled_from_log)
    """
    out: dict[str, Any] = {"is_clarification": None, "q_i": None, "c": None, "q_next": None, "facet": None,
                           "filled_from_log": [], "kept": False, "reject_reason": None, "status": "ok",
                           "error": None}
    obj, err = parse_json_object(raw)
    if obj is None:
        return out | {"status": "parse_error", "error": err, "reject_reason": "parse_error"}
    flag = obj.get("is_clarification")
    if isinstance(flag, str) and flag.strip().lower() in ("true", "false"):
        flag = flag.strip().lower() == "true"
    if not isinstance(flag, bool):
        return out | {"status": "parse_error", "error": f"field 'is_clarification' should be a boolean, got {flag!r}",
                      "reject_reason": "parse_error"}
    out["is_clarification"] = flag
    if not flag:
        return out | {"reject_reason": "not_clarification"}

    def text(name: str) -> str:
        v = obj.get(name)
        return v.strip() if isinstance(v, str) else ""

    facet = text("facet")
    if not facet:
        return out | {"status": "parse_error", "error": "partial: is_clarification true but no facet",
                      "reject_reason": "parse_error"}
    filled = []
    values = {}
    for name, col, logged in (("query", "q_i", "query"), ("clarifying_question", "c", "clarifying_question"),
                              ("refined_query", "q_next", "reply")):
        values[col] = text(name)
        if not values[col]:
            values[col] = candidate[logged]
            filled.append(col)
    return out | values | {"facet": facet, "filled_from_log": filled, "kept": True}


def parse_extractions(candidates: pl.DataFrame, requests: list[ChatRequest], results: list[ChatResult]
                      ) -> pl.DataFrame:
    rows = []
    for cand, req, res in zip(candidates.iter_rows(named=True), requests, results, strict=True):
        base = {k: cand[k] for k in ("candidate_id", "conversation_id", "turn_index", "source", "log_date")}
        base |= {"raw_output": res.text if not res.error else None, "model": res.model,
                 "prompt_version": req.prompt_version}
        if res.error:
            parsed = parse_extraction(cand, None) | {"status": "llm_error", "error": res.error,
                                                    "reject_reason": "llm_error"}
        else:
            parsed = parse_extraction(cand, res.text)
        rows.append(base | parsed)
    return pl.DataFrame(rows, schema=EXTRACTION_COLUMNS)


def skipped_extractions(candidates: pl.DataFrame, limit: int) -> pl.DataFrame:
    """Candidates over logs.max_extractions: rows with status 'skipped', so nothing disappears."""
    return candidates.select(
        "candidate_id", "conversation_id", "turn_index", "source", "log_date",
    ).with_columns(kept=pl.lit(False), status=pl.lit("skipped"), reject_reason=pl.lit("skipped"),
                   error=pl.lit(f"over logs.max_extractions={limit}"))
