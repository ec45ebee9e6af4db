"""Atomic writers: a temp file in the target folder, fsync, then rename. A reader sees the old file or the
new one, never half of one; a killed writer leaves the last good file in place."""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl
import psutil

TEMP_SUFFIX = ".tmp"
# a temp file of atomic_path: '.<target name>.w<writer pid>.<8 random characters><suffix>.tmp'; earlier versions
# had no pid, and before that ended it with the suffix ('.data.parquet.k2x9_a0b.parquet'), so the views'
# '*.parquet' glob read it while it was written
TEMP_NAME = re.compile(r"^\..+\.[a-z0-9_]{8}(\.[A-Za-z0-9]+)+$")
WRITER_PID = re.compile(r"\.w(\d+)\.[a-z0-9_]{8}\.")


@contextmanager
def staged_path(path: str | Path, suffix: str = "") -> Iterator[Path]:
    """A temp path beside `path` (same filesystem), fsynced and kept when the block ends without error (the caller
    renames it into place: lib/warehouse.publish), removed otherwise. Its name, '.<name>.w<pid>.<random><suffix>.tmp',
    matches no reader's glob ('*.parquet', '*.csv')."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.w{os.getpid()}.", suffix=suffix + TEMP_SUFFIX,
                               dir=target.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file a plain write's permissions
    try:
        yield Path(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def atomic_path(path: str | Path, suffix: str = "") -> Iterator[Path]:
    """A temp path (staged_path) renamed onto `path` when the block ends without error, removed otherwise."""
    with staged_path(path, suffix) as tmp:
        yield tmp
    try:
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def is_temp_file(path: Path) -> bool:
    """A temp file of atomic_path, of this version or an earlier one (hidden, '.<name>.<random>.<suffix>')."""
    return bool(TEMP_NAME.match(path.name))


def writer_alive(path: Path) -> bool:
    """Whether the process named in a temp file's name (``.w<pid>.``) still runs: its staged files may wait for the
    warehouse's lock (lib/warehouse.publish) for as long as a query runs. Names without a pid: False."""
    m = WRITER_PID.search(path.name)
    return bool(m) and psutil.pid_exists(int(m.group(1)))


def remove_temp_leftovers(folder: str | Path, before: float) -> list[Path]:
    """Delete the temp files below ``folder`` last modified before ``before`` (an epoch time) whose writer no longer
    runs: what a writer killed between create and rename left behind. A write in flight keeps its temp file."""
    root = Path(folder)
    if not root.is_dir():
        return []
    stale = sorted(p for p in root.rglob(".*") if is_temp_file(p) and p.is_file() and p.lstat().st_mtime < before
                   and not writer_alive(p))
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


def write_parquet_atomic(df: pl.DataFrame, path: str | Path) -> None:
    with atomic_path(path, ".parquet") as tmp:
        df.write_parquet(tmp)


def write_jsonl_atomic(rows: pl.DataFrame | Iterable[dict[str, Any]], path: str | Path) -> int:
    """One JSON object per line (a frame as polars writes it; dicts as UTF-8 JSON); returns the line count."""
    with atomic_path(path, ".jsonl") as tmp:
        if isinstance(rows, pl.DataFrame):
            rows.write_ndjson(tmp)
            return rows.height
        n = 0
        with open(tmp, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
                n += 1
        return n


class PartitionWriters:
    """Streams frames into one Parquet file per partition key under a staging folder: each key's rows are buffered
    up to `row_group_rows` and written as one row group (a frame is never split across row groups, so rows that
    must stay together, a conversation's turns, are read back together). Memory: keys x row_group_rows rows.
    `close()` writes the keys that got no rows as empty files of `schema` and returns {key: staged file}."""

    def __init__(self, folder: str | Path, keys: Iterable[str], schema: dict[str, Any], row_group_rows: int):
        self.folder, self.keys, self.row_group_rows = Path(folder), list(keys), row_group_rows
        self.schema = pl.DataFrame(schema=schema).to_arrow().schema
        self.writers: dict[str, Any] = {}
        self.buffers: dict[str, list[pl.DataFrame]] = {k: [] for k in self.keys}
        self.rows = dict.fromkeys(self.keys, 0)
        self.folder.mkdir(parents=True, exist_ok=True)

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.parquet"

    def write(self, key: str, df: pl.DataFrame) -> None:
        """Add rows to `key`'s file (a row group is flushed once the buffer reaches row_group_rows)."""
        if key not in self.buffers:
            raise KeyError(f"partition {key!r} is not one of the {len(self.keys)} being written")
        if df.height:
            self.buffers[key].append(df)
            self.rows[key] += df.height
            if sum(b.height for b in self.buffers[key]) >= self.row_group_rows:
                self._flush(key)

    def _flush(self, key: str) -> None:
        import pyarrow.parquet as pq

        parts, self.buffers[key] = self.buffers[key], []
        if not parts:
            return
        table = pl.concat(parts).to_arrow()
        table = table if table.schema.equals(self.schema) else table.cast(self.schema)
        if key not in self.writers:
            self.writers[key] = pq.ParquetWriter(self.path(key), self.schema)
        self.writers[key].write_table(table, row_group_size=max(table.num_rows, 1))

    def close(self) -> dict[str, Path]:
        """Flush every buffer, close every file, write empty files for keys without rows; {key: staged file}."""
        import pyarrow.parquet as pq

        for key in self.keys:
            self._flush(key)
            if key in self.writers:
                self.writers.pop(key).close()
            else:
                pq.write_table(self.schema.empty_table(), self.path(key))
        return {k: self.path(k) for k in self.keys}
