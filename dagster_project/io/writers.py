"""Atomic writers: a temp file in the target folder, fsync, then rename. A reader sees the old file or the
new one, never half of one; a killed writer leaves the last good file in place."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl


@contextmanager
def atomic_path(path: str | Path, suffix: str = "") -> Iterator[Path]:
    """A temp path beside `path`; renamed onto it when the block ends without error, removed otherwise."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix or ".tmp", dir=target.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file a plain write's permissions
    try:
        yield Path(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


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
