"""One records layer for every input file: CSV / TSV / JSON / JSONL / YAML / Parquet (optionally .gz) ->
records that know their file and 1-based record number, a Quarantine for what cannot be used, and one
error type for files that cannot be read at all. Dataset formats (io/formats/) sit on top of it.

Records stream (JSONL line by line, JSON arrays and the list of a ``{"key": [...]}`` document item by item with
io.scan, CSV / TSV rows with io.delimited, Parquet by row group), so a log file of millions of lines never needs
to fit in memory. A record that cannot be used is yielded with its `problem` set, never raised: the caller
quarantines it and goes on. That covers unparseable records (a broken item of a JSON array or keyed document
costs only itself, a stray quote in CSV one row, in TSV none), text that is not valid UTF-8 (never replaced
silently) and text fields longer than `max_field_chars`. The JSON layout (lines, array, document) is read from the
content, not the suffix. `count_records` counts a file's records without parsing them, for ledgers that
must notice a reader losing records.
"""

from __future__ import annotations

import gzip
import io
import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import polars as pl
import yaml

from dagster_project.io.delimited import read_table
from dagster_project.io.scan import UNPARSED, count_items, split_array, split_keyed

RAW_SNIPPET = 500
MAX_FIELD_CHARS = 1_000_000  # default cap on one text value; importers pass their params' value
WHOLE_RECORD = "<record>"  # the `field` of a rejection that concerns the whole record
JSONL_SUFFIXES = (".jsonl", ".ndjson")
DETECT_LINE_BYTES = 8 << 20  # a first line longer than this is not parsed to detect the layout
SUFFIXES = (".csv", ".tsv", ".tab", ".json", ".jsonl", ".ndjson", ".yaml", ".yml", ".parquet")
QUARANTINE_SCHEMA = {"file": pl.Utf8, "record": pl.Int64, "field": pl.Utf8, "reason": pl.Utf8, "raw": pl.Utf8}


class InputFileError(ValueError):
    """An input cannot be used at all. The message names the file, and the record, field and params key
    where they are known."""

    def __init__(self, file: str | Path, problem: str, record: int | None = None, field: str | None = None,
                 key: str | None = None):
        where = [str(file)] + ([f"record {record}"] if record is not None else []) + \
            ([f"field {field!r}"] if field else [])
        text = ": ".join([", ".join(where), problem]) + (f" (params: {key})" if key else "")
        super().__init__(_valid_text(text))  # a message quoting undecodable bytes must still print
        self.file, self.record, self.field, self.key, self.problem = str(file), record, field, key, problem

    def with_key(self, key: str) -> InputFileError:
        """The same error naming the params key that points at the file (unless it names one already)."""
        return self if self.key else InputFileError(self.file, self.problem, self.record, self.field, key)


@dataclass(frozen=True)
class Record:
    """One record of a file: the parsed value, or the problem that kept it from being parsed."""

    file: str
    record: int  # 1-based: a JSONL line, a CSV / TSV data row (header excluded), a JSON / Parquet item
    data: Any = None
    raw: str = ""
    problem: str | None = None  # not_utf8 | invalid_json | ragged_row | unbalanced_quote | oversized_field |
    #                             unreadable_row (data None) | not_an_object (data = the value)
    detail: str | None = None
    field: str | None = None  # where the problem is, when it is one field (e.g. 'conversations[2].value')


@dataclass
class Quarantine:
    """The records an asset could not use, with why: one schema for every `*_rejected` table."""

    rows: list[dict[str, Any]] = field(default_factory=list)

    def add(self, file: str, record: int | None, reason: str, field: str | None = None, raw: Any = "") -> None:
        text = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False, default=str)
        self.rows.append({"file": _valid_text(file), "record": record, "field": _valid_text(field or WHOLE_RECORD),
                          "reason": _valid_text(reason), "raw": _valid_text(text[:RAW_SNIPPET])})

    def add_record(self, rec: Record, reason: str, field: str | None = None) -> None:
        self.add(rec.file, rec.record, reason, field or rec.field, rec.raw)

    def frame(self) -> pl.DataFrame:
        return pl.DataFrame(self.rows, schema=QUARANTINE_SCHEMA)

    def reasons(self) -> Counter[str]:
        return Counter(r["reason"] for r in self.rows)

    def __len__(self) -> int:
        return len(self.rows)


def _valid_text(text: str) -> str:
    """Text that can be stored: undecodable bytes and lone surrogates shown as U+FFFD (quarantine rows only)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)
    return text


def _snippet(obj: Any) -> str:
    return _valid_text(json.dumps(obj, ensure_ascii=False, default=str)[:RAW_SNIPPET])


def _open_binary(path: Path) -> IO[bytes]:
    return gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")


def _suffix(path: Path) -> str:
    name = path.name.lower().removesuffix(".gz")
    return Path(name).suffix


def _bad_text(obj: Any, max_chars: int) -> tuple[str, str, str] | None:
    """(problem, field, detail) for the first text value of a record that is not valid UTF-8 (bytes read with
    surrogateescape, or a lone surrogate escape; keys too) or longer than `max_chars`; None when all are fine."""
    stack: list[tuple[str, Any]] = [("", obj)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, dict):
            for k, v in reversed(value.items()):
                name = f"{where}.{k}" if where else str(k)
                if isinstance(k, str) and (bad := _bad_text(k, len(k))):
                    return bad[0], name, bad[2]
                stack.append((name, v))
        elif isinstance(value, list | tuple):
            stack.extend((f"{where}[{i}]", v) for i, v in reversed(list(enumerate(value))))
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as e:
                return "not_utf8", where or WHOLE_RECORD, f"invalid UTF-8 at character {e.start}"
            if len(value) > max_chars:
                return "oversized_field", where or WHOLE_RECORD, f"{len(value)} characters > limit {max_chars}"
    return None


def _plain(text: str, max_chars: int) -> bool:
    """True when no value parsed from the JSON `text` can hold bad text: no longer than max_chars (no value is
    longer than its source), valid UTF-8, and no \\uD800-\\uDFFF escape (which decodes to a lone surrogate)."""
    if len(text) > max_chars or _SURROGATE_ESCAPE.search(text):
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _object(file: str, number: int, obj: Any, raw: str, max_chars: int, text: str | None = None) -> Record:
    """A parsed value as a record: not an object, bad text, or usable. With the value's JSON `text`, the walk
    over every string is skipped when the text alone shows none can be bad (the common case, ~2x faster reads)."""
    if (text is None or not _plain(text, max_chars)) and (bad := _bad_text(obj, max_chars)) is not None:
        return Record(file, number, raw=_valid_text(raw), problem=bad[0], detail=bad[2], field=bad[1])
    if not isinstance(obj, dict):
        return Record(file, number, obj, raw, problem="not_an_object",
                      detail=f"expected a JSON object, got {type(obj).__name__}")
    return Record(file, number, obj, raw)


def _parse(file: str, number: int, data: bytes | str, max_chars: int) -> Record:
    """One JSON value (a line, an array item) from its bytes (or text read with surrogateescape): strict UTF-8,
    then JSON, then the value checks."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        if isinstance(data, str):
            data.encode("utf-8")
    except (UnicodeDecodeError, UnicodeEncodeError) as e:
        raw = data[:RAW_SNIPPET]
        raw = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else _valid_text(raw)
        return Record(file, number, raw=raw, problem="not_utf8", detail=f"position {e.start}: {e.reason}")
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, huge integers, absurd nesting
        detail = f"{e.msg} at char {e.pos}" if isinstance(e, json.JSONDecodeError) else str(e)[:200]
        return Record(file, number, raw=text[:RAW_SNIPPET], problem="invalid_json", detail=detail or type(e).__name__)
    return _object(file, number, obj, text[:RAW_SNIPPET], max_chars, text)


def _jsonl(path: Path, file: str, max_chars: int) -> Iterator[Record]:
    with _open_binary(path) as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                yield _parse(file, number, line.rstrip(b"\r\n"), max_chars)


def _json_array(path: Path, file: str, max_chars: int) -> Iterator[Record]:
    """Items of a top-level JSON array, split at record boundaries by io.scan: a broken item is one invalid_json
    record and the items after it are read as usual."""
    with _open_binary(path) as f:
        for number, (text, value) in enumerate(split_array(f), 1):
            if value is UNPARSED:
                yield _parse(file, number, text, max_chars)
            else:
                yield _object(file, number, value, text[:RAW_SNIPPET], max_chars, text)


def _json_document(path: Path, file: str, suffix: str, max_chars: int) -> Iterator[Record]:
    """A JSON / YAML document holding a list of records, or one key holding that list, or one record. A JSON
    ``{"key": [...]}`` streams its items (each broken one quarantined alone); so does a document that opens like
    one and is not valid JSON (a broken item, a cut-off end)."""
    opens_keyed, ends_keyed = keyed_list(path) if suffix != ".yaml" else (False, False)
    if opens_keyed and ends_keyed:
        yield from _keyed_items(path, file, max_chars)
        return
    with _open_binary(path) as f:
        text = f.read().decode("utf-8", errors="surrogateescape")  # bad bytes: found per record below
    try:
        data = json.loads(text) if suffix != ".yaml" else yaml.safe_load(text)
    except (ValueError, RecursionError, yaml.YAMLError) as e:
        if opens_keyed:
            yield from _keyed_items(path, file, max_chars)
            return
        kind = "YAML" if suffix == ".yaml" else "JSON"
        raise InputFileError(file, f"not valid {kind}: {' '.join(str(e).split())[:200]}") from None
    if isinstance(data, dict) and len(data) == 1 and isinstance(next(iter(data.values())), list):
        data = next(iter(data.values()))  # {"intents": [...]} (YAML; JSON of this shape streams above)
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise InputFileError(file, "expected a list of records (or one key holding a list)")
    for number, obj in enumerate(data, 1):
        yield _object(file, number, obj, _snippet(obj), max_chars)


def _keyed_items(path: Path, file: str, max_chars: int) -> Iterator[Record]:
    with _open_binary(path) as f:
        for number, (text, value) in enumerate(split_keyed(f), 1):
            if value is UNPARSED:
                yield _parse(file, number, text, max_chars)
            else:
                yield _object(file, number, value, text[:RAW_SNIPPET], max_chars, text)


TAIL_BYTES = 4096  # the end of a document read to tell its layout
_KEYED_HEAD = re.compile(rb'[ \t\r\n]*\{[ \t\r\n]*"(?:[^"\\\r\n]|\\.)*"[ \t\r\n]*:[ \t\r\n]*\[')
_KEYED_TAIL = re.compile(rb'\][ \t\r\n]*\}[ \t\r\n]*\Z')


def keyed_list(path: str | Path) -> tuple[bool, bool]:
    """Whether a JSON document opens like ``{"key": [`` and whether it ends with ``]}``: both, and it is read as
    the list under one key, item by item. (A document with more keys whose first and last values are lists reads
    so too; the text after the first list is then one broken record.)"""
    with _open_binary(Path(path)) as f:
        head = f.read(1 << 16).removeprefix(b"\xef\xbb\xbf")
        if not _KEYED_HEAD.match(head):
            return False, False
        tail = head[-TAIL_BYTES:]
        while chunk := f.read(1 << 20):
            tail = (tail + chunk)[-TAIL_BYTES:]
    return True, _KEYED_TAIL.search(tail) is not None


def _table(path: Path, file: str, suffix: str, batch_size: int, max_chars: int) -> Iterator[Record]:
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        number = 0
        for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_size):
            for obj in batch.to_pylist():
                number += 1
                yield _object(file, number, obj, _snippet(obj), max_chars)
        return
    with _text(path) as f:
        header, rows = read_table(f, suffix != ".csv", max(max_chars, MAX_FIELD_CHARS))
        if header is None:
            return
        header[0] = header[0].removeprefix("\ufeff")
        if _bad_text(header, MAX_FIELD_CHARS):
            raise InputFileError(file, "the header row is not valid UTF-8")
        for number, row in enumerate(rows, 1):  # data rows; the header is not a record
            if row.cells == []:
                continue
            if row.cells is None:
                field = header[row.cell] if row.cell is not None and row.cell < len(header) else None
                yield Record(file, number, raw=_valid_text(row.raw[:RAW_SNIPPET]), problem=row.problem,
                             detail=row.detail, field=field)
                continue
            obj = dict(zip(header, row.cells, strict=True))
            yield _object(file, number, obj, _snippet(obj), max_chars)


def _text(path: Path) -> IO[str]:
    """A CSV / TSV file as text for io.delimited: bytes that are not UTF-8 kept as surrogate escapes."""
    return io.TextIOWrapper(_open_binary(path), encoding="utf-8", errors="surrogateescape", newline="")


def _table_rows(path: Path, suffix: str) -> int:
    with _text(path) as f:
        header, rows = read_table(f, suffix != ".csv", MAX_FIELD_CHARS)
        return sum(1 for row in rows if row.cells != [])


def _first_lines(path: Path) -> list[bytes]:
    """The first two non-blank lines (each cut at DETECT_LINE_BYTES), BOM removed."""
    out: list[bytes] = []
    with _open_binary(path) as f:
        while len(out) < 2:
            line = f.readline(DETECT_LINE_BYTES)
            if not line:
                break
            if not out:
                line = line.removeprefix(b"\xef\xbb\xbf")
            if line.strip():
                out.append(line.strip())
    return out


def _whole_value(line: bytes) -> Any:
    """The JSON value a line holds on its own, or a sentinel when it holds none."""
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return _NOT_JSON


_NOT_JSON = object()


def json_layout(path: str | Path) -> str:
    """'lines' | 'array' | 'document': how a JSON-family file is laid out, read from its content.

    Lines when the first line is a whole JSON value and another line follows (whatever the suffix, so a
    .jsonl file whose first line is an array is JSON Lines); a single line holding an array is an array. When
    the first line is not a whole value: an array when it starts with '[' (unless the file is named .jsonl and
    its second line is a whole value), a document when a .json file starts with '{' (unless its first line ends
    like a record and its second is a whole value: JSON Lines with a broken first line), else lines.
    """
    p = Path(path)
    suffix = _suffix(p)
    lines = _first_lines(p)
    if not lines:
        return "lines"
    first = _whole_value(lines[0])
    if first is not _NOT_JSON:
        if len(lines) > 1:
            return "lines"
        return "array" if isinstance(first, list) else "document" if suffix == ".json" else "lines"
    second_whole = len(lines) > 1 and _whole_value(lines[1]) is not _NOT_JSON
    if lines[0][:1] == b"[":
        return "lines" if suffix in JSONL_SUFFIXES and second_whole else "array"
    if lines[0][:1] == b"{" and suffix == ".json" and not (second_whole and lines[0][-1:] in b"}]\"0123456789el"):
        return "document"  # unless line 1 looks like a whole (broken) record and line 2 is one
    return "lines"


def iter_records(path: str | Path, batch_size: int = 10_000, key: str | None = None,
                 max_field_chars: int = MAX_FIELD_CHARS) -> Iterator[Record]:
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
            yield from _table(p, file, suffix, batch_size, max_field_chars)
        elif suffix in (".yaml", ".yml"):
            yield from _json_document(p, file, ".yaml", max_field_chars)
        else:
            layout = json_layout(p)
            if layout == "array":
                yield from _json_array(p, file, max_field_chars)
            elif layout == "document":
                yield from _json_document(p, file, suffix, max_field_chars)
            else:
                yield from _jsonl(p, file, max_field_chars)
    except InputFileError as err:
        raise (err.with_key(key) if key else err) from None
    except Exception as err:  # noqa: BLE001 - any reader failure names the file
        raise InputFileError(file, f"cannot be read: {type(err).__name__}: {err}", key=key) from None


def count_records(path: str | Path) -> int:
    """How many records `iter_records` must account for, counted without parsing any record (non-blank lines,
    array items found by io.scan, CSV data rows, Parquet metadata): a ledger compares it with what a reader
    kept + rejected, so a reader that loses records is noticed."""
    p = Path(path)
    suffix = _suffix(p)
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.ParquetFile(p).metadata.num_rows
    if suffix in (".csv", ".tsv", ".tab"):
        return _table_rows(p, suffix)
    if suffix in (".yaml", ".yml") or json_layout(p) == "document":
        return sum(1 for _ in iter_records(p))
    with _open_binary(p) as f:
        if json_layout(p) == "array":
            return count_items(f)
        return sum(1 for line in f if line.strip())


@dataclass
class RequiredColumns:
    """Required columns of a JSON / JSONL / YAML file (whose records carry their own keys): a column that no
    parsed record has is a whole-file error naming file and column, not one rejection per record."""

    file: str
    required: tuple[str, ...]
    key: str | None = None
    seen: set[str] = field(default_factory=set)
    parsed: int = 0

    def see(self, data: Any) -> None:
        if isinstance(data, dict):
            self.parsed += 1
            self.seen.update(c for c in self.required if c in data)

    def check(self) -> None:
        """Raise InputFileError when records were parsed and none of them has one of the columns."""
        missing = [c for c in self.required if c not in self.seen]
        if self.parsed and missing:
            raise InputFileError(self.file, f"missing column(s) {missing}: no record of {self.parsed} has it "
                                            f"(required: {list(self.required)})", key=self.key)


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
