"""A trained model's folder under assets/training/<name>/: built in a hidden sibling and swapped in whole, so a
killed run never leaves a half model a subject could load; a rerun whose config and data match is skipped."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl

TRAINING_JSON = "training.json"
LOSS_CURVE = "loss_curve.parquet"
RESULT_SCHEMA = {
    "model": pl.Utf8, "kind": pl.Utf8, "status": pl.Utf8, "reason": pl.Utf8, "data_asset": pl.Utf8, "rows": pl.Int64,
    "steps": pl.Int64, "final_loss": pl.Float64, "train_loss": pl.Float64, "wall_s": pl.Float64, "tokens": pl.Int64,
    "tokens_per_s": pl.Float64, "data_sha256": pl.Utf8, "folder": pl.Utf8,
}


def normalized(obj: Any) -> Any:
    """`obj` as it reads back from JSON (tuples -> lists, ...): what a stored config is compared against."""
    return json.loads(json.dumps(obj, sort_keys=True, default=str))


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def folder_fingerprint(path: Path) -> str:
    """sha256 of a model folder's config files and its weight files' names and sizes (hashing 15 GB of 7B
    weights on every run would cost minutes); a hub id (no folder) is its own fingerprint."""
    if not path.is_dir():
        return f"hub:{path}"
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        rel = f.relative_to(path).as_posix()
        h.update(rel.encode())
        h.update(f.read_bytes() if f.suffix == ".json" else str(f.stat().st_size).encode())
    return h.hexdigest()


def unchanged(folder: Path, config: dict[str, Any], data_sha256: str, required: tuple[str, ...]) -> dict | None:
    """The stored training.json when `folder` was trained with exactly this config on exactly this data and holds
    every `required` entry; else None."""
    meta_path = folder / TRAINING_JSON
    if not meta_path.is_file() or not all((folder / r).exists() for r in required):
        return None
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        return None
    same = meta.get("config") == normalized(config) and meta.get("data", {}).get("sha256") == data_sha256
    return meta if same else None


def touch_tree(folder: Path) -> None:
    """Mark a kept folder as produced by this run: `clarify materialize` prunes files it did not write."""
    now = time.time()
    for p in [folder, *folder.rglob("*")]:
        os.utime(p, (now, now))


@contextmanager
def building(folder: Path) -> Iterator[Path]:
    """A fresh hidden sibling of `folder` to build in; on success it replaces `folder` (old one removed), on error
    it is deleted and `folder` stays as it was. Leftovers of killed runs are removed first."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    for stale in folder.parent.glob(f".{folder.name}.*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = folder.with_name(f".{folder.name}.partial-{os.getpid()}")
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = folder.with_name(f".{folder.name}.old-{os.getpid()}")
    if folder.exists():
        folder.rename(old)
    tmp.rename(folder)
    shutil.rmtree(old, ignore_errors=True)


def write_meta(folder: Path, meta: dict[str, Any], curve: list[dict[str, Any]]) -> None:
    """training.json and loss_curve.parquet (step, epoch, loss, learning_rate, + whatever else the trainer logged)."""
    (folder / TRAINING_JSON).write_text(json.dumps(normalized(meta), indent=2, sort_keys=True) + "\n")
    pl.DataFrame(curve, schema_overrides={"step": pl.Int64}, infer_schema_length=None).write_parquet(
        folder / LOSS_CURVE)


def result_row(name: str, kind: str, status: str, data_asset: str, rows: int, reason: str | None = None,
               meta: dict[str, Any] | None = None, folder: Path | None = None) -> dict[str, Any]:
    """One row of a training asset's table: what was built (or why not) and its headline numbers."""
    m = meta or {}
    stats = {k: m.get(k) for k in ("steps", "final_loss", "train_loss", "wall_s", "tokens", "tokens_per_s")}
    return {"model": name, "kind": kind, "status": status, "reason": reason, "data_asset": data_asset, "rows": rows,
            **stats, "data_sha256": m.get("data", {}).get("sha256"), "folder": str(folder) if folder else None}
