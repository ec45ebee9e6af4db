"""One records layer for every input file: CSV / TSV / JSON / JSONL / YAML / Parquet (optionally .gz) ->
records that know their file and 1-based record number, a Quarantine for what cannot be used, and one
error type for files that cannot be read at all. Dataset formats (io/formats/) sit on top of it.

Records stream (JSONL line by line, JSON arrays item by item with ijson, Parquet by row group), so a log
file of millions of lines never needs to fit in memory. A record that cannot be parsed is yielded with
its `problem` set, never raised: the caller quarantines it and goes on.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import polars as pl
import yaml

RAW_SNIPPET = 500
SUFFIXES = (".csv", ".tsv", ".tab", ".json", ".jsonl", ".ndjson", ".yaml", ".yml", ".parquet")
QUARANTINE_SCHEMA = {"file": pl.Utf8, "record": pl.Int64, "field": pl.Utf8, "reason": pl.Utf8, "raw": pl.Utf8}


class InputFileError(ValueError):
    """An input cannot be used at all. The message names the file, and the record, field and params key
    where they are known."""

    def __init__(self, file: str | Path, problem: str, record: int | None = None, field: str | None = None,
                 key: str | None = None):
        where = [str(file)] + ([f"record {record}"] if record is not None else []) + \
            ([f"field {field!r}"] if field else [])
        super().__init__(": ".join([", ".join(where), problem]) + (f" (params: {key})" if key else ""))
        self.file, self.record, self.field, self.key = str(file), record, field, key


@dataclass(frozen=True)
class Record:
    """One record of a file: the parsed value, or the problem that kept it from being parsed."""

    file: str
    record: int  # 1-based: the line of a JSONL file, the data row of a CSV / TSV (header excluded), the item of JSON / Parquet
    data: Any = None
    raw: str = ""
    problem: str | None = None  # not_utf8 | invalid_json | ragged_row (data None) | not_an_object (data = the value)
    detail: str | None = None


@dataclass
class Quarantine:
    """The records an asset could not use, with why: one schema for every `*_rejected` table."""

    rows: list[dict[str, Any]] = field(default_factory=list)

    def add(self, file: str, record: int | None, reason: str, field: str | None = None, raw: Any = "") -> None:
        text = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False, default=str)
        self.rows.append({"file": file, "record": record, "field": field, "reason": reason,
                          "raw": text[:RAW_SNIPPET]})

    def add_record(self, rec: Record, reason: str, field: str | None = None) -> None:
        self.add(rec.file, rec.record, reason, field, rec.raw)

    def frame(self) -> pl.DataFrame:
        return pl.DataFrame(self.rows, schema=QUARANTINE_SCHEMA)

    def reasons(self) -> Counter[str]:
        return Counter(r["reason"] for r in self.rows)

    def __len__(self) -> int:
        return len(self.rows)


def _snippet(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, default=str)[:RAW_SNIPPET]


def _open_binary(path: Path) -> IO[bytes]:
    return gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")


def _suffix(path: Path) -> str:
    name = path.name.lower().removesuffix(".gz")
    return Path(name).suffix


def _first_char(path: Path) -> str:
    with _open_binary(path) as f:
        head = f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    return head[:1].decode("ascii", "replace")


def _jsonl(path: Path, file: str) -> Iterator[Record]:
    with _open_binary(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                text = line.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as e:
                yield Record(file, number, raw=line[:RAW_SNIPPET].decode("utf-8", "replace").rstrip("\r\n"),
                             problem="not_utf8", detail=f"byte {e.start}: {e.reason}")
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as e:
                yield Record(file, number, raw=text[:RAW_SNIPPET], problem="invalid_json",
                             detail=f"{e.msg} at char {e.pos}")
                continue
            yield _object(file, number, obj, text[:RAW_SNIPPET])


def _object(file: str, number: int, obj: Any, raw: str) -> Record:
    if not isinstance(obj, dict):
        return Record(file, number, obj, raw, problem="not_an_object",
                      detail=f"expected a JSON object, got {type(obj).__name__}")
    return Record(file, number, obj, raw)


def _json_array(path: Path, file: str) -> Iterator[Record]:
    """Items of a top-level JSON array, streamed (constant memory whatever the file size)."""
    import ijson

    number = 0
    with _open_binary(path) as f:
        try:
            for number, obj in enumerate(ijson.items(f, "item", use_float=True), 1):
                yield _object(file, number, obj, _snippet(obj))
        except (ijson.JSONError, UnicodeDecodeError) as e:  # the rest of the array is unreadable
            problem = "not_utf8" if isinstance(e, UnicodeDecodeError) else "invalid_json"
            yield Record(file, number + 1, problem=problem,
                         detail=f"array unreadable from item {number + 1} on: {str(e)[:200]}")


def _json_document(path: Path, file: str, suffix: str) -> Iterator[Record]:
    """A JSON / YAML document holding a list of records, or one key holding that list."""
    with _open_binary(path) as f:
        text = f.read().decode("utf-8", errors="replace")
    try:
        data = json.loads(text) if suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        raise InputFileError(file, f"not valid {suffix[1:].upper()}: {' '.join(str(e).split())[:200]}") from None
    if isinstance(data, dict) and len(data) == 1 and isinstance(next(iter(data.values())), list):
        data = next(iter(data.values()))  # {"intents": [...]}
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise InputFileError(file, "expected a list of records (or one key holding a list)")
    for number, obj in enumerate(data, 1):
        yield _object(file, number, obj, _snippet(obj))


def _table(path: Path, file: str, suffix: str, batch_size: int) -> Iterator[Record]:
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        number = 0
        for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_size):
            for obj in batch.to_pylist():
                number += 1
                yield Record(file, number, obj, _snippet(obj))
        return
    with _open_binary(path) as raw, io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="") as f:
        rows = csv.reader(f, delimiter="," if suffix == ".csv" else "\t")
        header = next(rows, None)
        if header is None:
            return
        header[0] = header[0].removeprefix("\ufeff")
        for number, cells in enumerate(rows, 1):  # data rows; the header is not a record
            if not cells:
                continue
            if len(cells) != len(header):
                yield Record(file, number, raw=_snippet(cells), problem="ragged_row",
                             detail=f"expected {len(header)} fields, got {len(cells)}")
                continue
            obj = dict(zip(header, cells, strict=True))
            yield Record(file, number, obj, _snippet(obj))


def iter_records(path: str | Path, batch_size: int = 10_000, key: str | None = None) -> Iterator[Record]:
    """Every record of one file, in order. Raises InputFileError (naming the params `key` that points at the
    file, when given) only for a file that cannot be read at all."""
    p = Path(path)
    file = p.as_posix()
    if not p.is_file():
        raise InputFileError(file, "file not found", key=key)
    suffix = _suffix(p)
    if suffix not in SUFFIXES:
        raise InputFileError(file, f"unsupported file type {suffix!r}; supported: {', '.join(SUFFIXES)} (+ .gz)",
                             key=key)
    try:
        if suffix in (".csv", ".tsv", ".tab", ".parquet"):
            yield from _table(p, file, suffix, batch_size)
        elif suffix in (".yaml", ".yml"):
            yield from _json_document(p, file, suffix)
        elif _first_char(p) == "[":
            yield from _json_array(p, file)
        elif suffix == ".json" and _first_char(p) == "{" and not _is_jsonl(p):
            yield from _json_document(p, file, suffix)
        else:  # JSONL, or a .json file holding one object per line
            yield from _jsonl(p, file)
    except InputFileError as err:
        if key and not err.key:
            raise InputFileError(err.file, str(err).split(": ", 1)[1], err.record, err.field, key) from None
        raise
    except Exception as err:  # noqa: BLE001 - any reader failure names the file
        raise InputFileError(file, f"cannot be read: {type(err).__name__}: {err}", key=key) from None


def _is_jsonl(path: Path) -> bool:
    """A .json file is JSON Lines when its first line is a whole JSON value and another line follows."""
    with _open_binary(path) as f:
        first = f.readline()
        more = any(line.strip() for line in f)
    try:
        json.loads(first)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    return more


def read_records(path: str | Path, quarantine: Quarantine | None = None,
                 key: str | None = None) -> tuple[list[Record], Quarantine]:
    """All usable records of a file; unparseable ones go to the (given or a new) quarantine."""
    q = quarantine if quarantine is not None else Quarantine()
    good = []
    for rec in iter_records(path, key=key):
        if rec.problem:
            q.add_record(rec, f"{rec.problem}: {rec.detail}")
        else:
            good.append(rec)
    return good, q
