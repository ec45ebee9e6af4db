"""The warehouse: assets stored as Parquet under assets/<group>/, DuckDB views `<group>.<asset>` over them, and
publishing (renames and view updates under DuckDB's write lock). The Dagster IO manager on top is lib/io_manager.py.

Multi-dimension partitions are stored hive-style, assets/<group>/<asset>/<dim>=<v>/<dim>=<v>/data.parquet, with the
partition columns only in the folder names, so pandas, pyarrow, polars and DuckDB read the folder as one dataset."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from pathlib import Path

import duckdb
import polars as pl
import psutil
import pyarrow.parquet as pq
from tenacity import (
    retry,
    retry_if_exception_type,
    stop_after_delay,
    wait_random_exponential,
)

from dagster_project.io.writers import remove_temp_leftovers, write_parquet_atomic

ASSETS_DIR = "assets"
WAREHOUSE = "assets/warehouse.duckdb"
# The warehouse file is written in this DuckDB storage format so 1.x clients (the PyPI CLI 1.5, DBeaver) open it;
# duckdb 2.0's default (storage version 69) is refused by every 1.x client.
STORAGE_VERSION = "v1.0.0"
PARTITION_FILE = "data.parquet"
COLUMNS = "columns"  # AssetIn metadata key: load only these columns of an input (hive partition columns included)
# a partitioned view's files: every Parquet file below the folder except hidden ones (temp files of io.writers,
# '.<name>.<random>...', of this version or an earlier one whose names ended in .parquet)
VIEW_GLOB = "**/[!.]*.parquet"


def asset_path(base: str | Path, group: str, name: str) -> Path:
    return Path(base) / group / f"{name}.parquet"


def partition_relpath(partition_key: str) -> str:
    """A partition key as a relative path: 'dim=value/dim=value' for multi-partitions, else the key itself."""
    dims = getattr(partition_key, "keys_by_dimension", None)
    parts = [f"{d}={v}" for d, v in sorted(dims.items())] if dims else [str(partition_key)]
    for part in parts:
        if not part or part in (".", "..") or "/" in part or "\\" in part or "\0" in part:
            raise ValueError(f"partition key {partition_key!r} cannot be used as a file name")
    return "/".join(parts)


def partition_dir(base: str | Path, group: str, name: str) -> Path:
    """Folder of a partitioned asset: assets/<group>/<asset>/."""
    return Path(base) / group / name


def partition_path(base: str | Path, group: str, name: str, partition_key: str) -> Path:
    """assets/<group>/<asset>/<partition>.parquet; multi-partitions hive-style: .../<dim>=<v>/<dim>=<v>/data.parquet."""
    rel = partition_relpath(partition_key)
    if getattr(partition_key, "keys_by_dimension", None):
        return partition_dir(base, group, name) / rel / PARTITION_FILE
    return partition_dir(base, group, name) / f"{rel}.parquet"


def parquet_files(folder: Path, pattern: str = "*.parquet") -> list[Path]:
    """The Parquet files below ``folder`` whose names match ``pattern``, sorted, without hidden ones (VIEW_GLOB)."""
    return sorted(p for p in folder.rglob(pattern) if not p.name.startswith(".")) if folder.is_dir() else []


def partition_files(base: str | Path, group: str, name: str) -> list[Path]:
    """Every stored partition of an asset (sorted); empty when it is not partitioned or not built."""
    return parquet_files(partition_dir(base, group, name))


def partition_values(folder: Path, file: Path) -> dict[str, str]:
    """The hive partition columns of ``file`` from its folder names below ``folder`` ({} for daily partitions)."""
    return dict(part.split("=", 1) for part in file.parent.relative_to(folder).parts if "=" in part)


def partition_label(folder: Path, file: Path) -> str:
    """A stored partition's name: 'method=base/subject=s1' (hive folders) or '2024-05-01' (one file per key)."""
    rel = file.relative_to(folder)
    return rel.parent.as_posix() if file.name == PARTITION_FILE and rel.parent.parts else rel.with_suffix("").as_posix()


def read_partition(folder: Path, file: Path, columns: list[str] | None = None) -> pl.DataFrame:
    """One partition file with its partition columns added back from the folder names (as strings, at the end,
    where pyarrow and DuckDB put them too); only ``columns`` (in that order) when given."""
    values = partition_values(folder, file)
    df = read_columns(file, columns)
    return project(df.with_columns(pl.lit(v, pl.String).alias(k) for k, v in values.items()
                                   if k not in df.columns and (columns is None or k in columns)), columns, file)


def read_columns(file: Path, columns: list[str] | None) -> pl.DataFrame:
    """A Parquet file, or only those of ``columns`` it stores (the others may be hive partition columns)."""
    if columns is None:
        return pl.read_parquet(file)
    stored = pl.read_parquet_schema(file)
    return pl.read_parquet(file, columns=[c for c in columns if c in stored])


def project(df: pl.DataFrame, columns: list[str] | None, file: Path) -> pl.DataFrame:
    """``df`` (read from ``file``) as ``columns`` in that order (None: as it is); a column it lacks fails naming
    the file."""
    if columns is None:
        return df
    if missing := [c for c in columns if c not in df.columns]:
        raise KeyError(f"{file} has no column(s) {missing} (asked for by the input's '{COLUMNS}' metadata)")
    return df.select(columns)


def strip_partition_columns(df: pl.DataFrame, values: dict[str, str], where: str) -> pl.DataFrame:
    """``df`` without its partition columns (the folder names hold them); a column that disagrees with its
    partition's value is an error rather than being lost."""
    for col, value in values.items():
        if col in df.columns and (bad := df.filter(pl.col(col).cast(pl.String).ne_missing(value)).height):
            raise ValueError(f"{where}: column {col!r} has {bad} rows whose value is not the partition's {value!r}")
    return df.drop([c for c in values if c in df.columns])


def migrate_legacy_partitions(folder: Path) -> list[Path]:
    """Move partitions of the old layout (.../<dim>=<v>/<dim>=<v>.parquet, partition columns inside the file) to
    .../<dim>=<v>/<dim>=<v>/data.parquet without them, keeping the file's mtime (prune_stale reads it)."""
    moved = []
    for old in parquet_files(folder, "*=*.parquet"):
        new = old.parent / old.stem / PARTITION_FILE
        if not new.exists():
            df = strip_partition_columns(pl.read_parquet(old), partition_values(folder, new), str(old))
            write_parquet_atomic(df, new)
            mtime = old.stat().st_mtime
            os.utime(new, (mtime, mtime))
            moved.append(new)
        old.unlink()
    return moved


def read_asset(base: str | Path, group: str, name: str) -> pl.DataFrame | None:
    """The whole asset as one frame: its Parquet file, or the union of all its partitions; None if absent."""
    path = asset_path(base, group, name)
    if path.exists():
        return pl.read_parquet(path)
    files = partition_files(base, group, name)
    if not files:
        return None
    folder = partition_dir(base, group, name)
    return pl.concat([read_partition(folder, f) for f in files], how="diagonal_relaxed")


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _is_current_format(version: str) -> bool:
    return version.split(".")[0] == STORAGE_VERSION.split(".")[0]


def drop_newer_format(db_path: str | Path) -> bool:
    """Delete the warehouse if it is stored in a newer format than STORAGE_VERSION (written by an earlier version
    of this project; it holds only views, which the caller re-registers). True when it was deleted."""
    if not Path(db_path).exists():
        return False
    with duckdb.connect() as con:
        con.execute(f"ATTACH {_sql_str(str(db_path))} AS wh (READ_ONLY)")
        tags = con.execute("select tags from duckdb_databases() where database_name = 'wh'").fetchone()[0]
    if _is_current_format(tags.get("storage_version", "")):
        return False
    for stale in (Path(db_path), Path(f"{db_path}.wal")):
        stale.unlink(missing_ok=True)
    return True


def open_writable(db_path: str | Path) -> duckdb.DuckDBPyConnection:
    """The warehouse opened for writing, created in STORAGE_VERSION when it does not exist yet."""
    Path(db_path).parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH {_sql_str(str(db_path))} AS wh (STORAGE_VERSION '{STORAGE_VERSION}')")
        con.execute("USE wh")
    except BaseException:
        con.close()
        raise
    return con


def _view_source(path: Path | list[Path]) -> str:
    """The FROM clause of a view: one Parquet file, a partition folder (VIEW_GLOB), or a list of partition files."""
    hive = "union_by_name = true, hive_partitioning = true, hive_types_autocast = false"
    if isinstance(path, list):
        files = ", ".join(_sql_str(p.resolve().as_posix()) for p in path)
        return f"read_parquet([{files}], {hive})"
    target = path.resolve().as_posix()
    if path.is_dir():
        return f"read_parquet({_sql_str(target + '/' + VIEW_GLOB)}, {hive})"
    return f"read_parquet({_sql_str(target)})"


# another process holds the file for the few milliseconds of its own update (partition runs in parallel), or a
# `clarify sql` query holds it for the query's time: retry soon, with jitter so the waiters do not collide in step
_wait_for_lock = retry(retry=retry_if_exception_type(duckdb.IOException), stop=stop_after_delay(60),
                       wait=wait_random_exponential(multiplier=0.05, max=2), reraise=True)
_open_writable_waiting = _wait_for_lock(open_writable)
_drop_newer_format_waiting = _wait_for_lock(drop_newer_format)


def publish(db_path: str | Path, staged: dict[Path, Path], views: dict[str, Path | list[Path]]) -> None:
    """Rename each staged temp file onto its target ({temp: target}) and CREATE OR REPLACE the views, all while
    holding the warehouse's write lock. A `clarify sql` query holds the read lock for its whole run, and DuckDB opens
    a Parquet file twice per query (its metadata when binding, its pages when scanning): a file replaced in between
    would be read half old, half new. The staged files are removed when the lock cannot be had."""
    try:
        if _drop_newer_format_waiting(db_path):
            views = {**_assets_on_disk(Path(db_path).parent), **views}
        con = _open_writable_waiting(db_path)
    except BaseException:
        for tmp in staged:
            tmp.unlink(missing_ok=True)
        raise
    with con:
        for tmp, target in staged.items():
            os.replace(tmp, target)
        for qualified, path in views.items():
            schema, name = qualified.split(".", 1)
            source = _view_source(path if isinstance(path, list) else Path(path))
            con.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            con.execute(f"CREATE OR REPLACE VIEW \"{schema}\".\"{name}\" AS SELECT * FROM {source}")


def register_views(db_path: str | Path, views: dict[str, Path | list[Path]]) -> None:
    """CREATE OR REPLACE VIEW schema.name over each Parquet path, stored absolute so any client opens the file
    from any working directory (after moving the project, `clarify views` records the new paths).

    A folder (a partitioned asset) becomes a view over the union of every Parquet file below it (VIEW_GLOB),
    matched by column name, with the hive folder names as string columns, so `<group>.<asset>` shows all
    partitions' rows; a list of files (rebuild_views, when a folder holds unreadable ones) is a view over those.
    """
    publish(db_path, {}, views)


def _assets_on_disk(base: Path) -> dict[str, Path]:
    """'<group>.<asset>' -> its Parquet file or partition folder, for every asset stored under ``base``."""
    found = {f"{p.parent.name}.{p.stem}": p for p in sorted(base.glob("*/*.parquet")) if not p.name.startswith(".")}
    for folder in sorted(base.glob("*/*/")):
        if folder.is_dir() and f"{folder.parent.name}.{folder.name}" not in found and parquet_files(folder):
            migrate_legacy_partitions(folder)
            found[f"{folder.parent.name}.{folder.name}"] = folder
    return found


def unreadable(files: list[Path]) -> dict[Path, str]:
    """{file: why} for each of ``files`` whose Parquet footer cannot be read (empty, cut off, not Parquet)."""
    problems = {}
    for file in files:
        try:
            pq.read_metadata(file)
        except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
            problems[file] = str(err)
    return problems


def rebuild_views(base: str | Path = ASSETS_DIR, db_path: str | Path = WAREHOUSE,
                  say: Callable[[str], None] = lambda m: None) -> list[str]:
    """Register a view for every assets/<group>/<asset>.parquet on disk (after `dvc checkout`, say),
    and for every partitioned asset folder assets/<group>/<asset>/ holding Parquet files. A file that cannot be
    read is left out (``say`` names it): a folder's view then lists its readable files; an asset with none
    keeps no new view. Returns the views registered."""
    views: dict[str, Path | list[Path]] = {}
    for name, path in _assets_on_disk(Path(base)).items():
        files = parquet_files(path) if path.is_dir() else [path]
        bad = unreadable(files)
        for file, why in bad.items():
            say(f"skipped {file} (view {name}): not a readable Parquet file: {why}")
        if not bad:
            views[name] = path
        elif len(bad) < len(files):
            views[name] = [f for f in files if f not in bad]
    if views:
        register_views(db_path, views)
    return sorted(views)


def remove_leftover_temp_files(group: str, base: str | Path = ASSETS_DIR) -> list[Path]:
    """At the start of a run of ``group``: delete the temp files under assets/<group>/ that are older than this
    process, left by a writer killed between create and rename (a write in flight now keeps its newer file)."""
    return remove_temp_leftovers(Path(base) / group, psutil.Process().create_time())


def prune_stale(group: str, since: float, base: str | Path = ASSETS_DIR, db_path: str | Path = WAREHOUSE) -> list[Path]:
    """After a complete run of ``group``: delete every file of assets/<group>/ not written since ``since`` (an
    epoch time), empty folders, and the views left without files. DVC keeps the group's folder in place
    (``persist: true``) so a failed or killed run leaves the last good outputs; this removes what a finished run
    no longer produces (dropped partitions, renamed assets, old exports). Returns the deleted files."""
    folder = Path(base) / group
    if not folder.is_dir():
        return []
    stale = sorted(p for p in folder.rglob("*") if (p.is_file() or p.is_symlink()) and p.lstat().st_mtime < since)
    # under the write lock, like publish: a `clarify sql` query never loses a file between binding and scanning
    with _open_writable_waiting(db_path) if stale and Path(db_path).exists() else nullcontext() as con:
        for path in stale:
            path.unlink()
        for sub in sorted((d for d in folder.rglob("*") if d.is_dir()), key=lambda d: len(d.parts), reverse=True):
            if not any(sub.iterdir()):
                sub.rmdir()
        if con is not None:
            _drop_orphan_views(con, group, base)
    return stale


def _drop_orphan_views(con: duckdb.DuckDBPyConnection, group: str, base: str | Path) -> None:
    """Drop the views of ``group`` whose Parquet file or partition folder is gone."""
    names = [r[0] for r in con.execute("select view_name from duckdb_views() where schema_name = ? "
                                       "and not internal", [group]).fetchall()]
    for name in names:
        if not asset_path(base, group, name).exists() and not partition_files(base, group, name):
            con.execute(f'DROP VIEW "{group}"."{name}"')


def read_row_groups(path: Path) -> Iterator[pl.DataFrame]:
    """A stored Parquet file one row group at a time (io.writers.PartitionWriters keeps related rows in one)."""
    pf = pq.ParquetFile(path)
    for i in range(pf.metadata.num_row_groups):
        yield pl.from_arrow(pf.read_row_group(i))
