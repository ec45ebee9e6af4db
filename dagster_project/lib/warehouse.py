"""Parquet IO manager (atomic writes) + DuckDB views `<group>.<asset>` over the Parquet files."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
import duckdb
import polars as pl
from tenacity import retry, retry_if_exception_type, stop_after_delay, wait_exponential

from dagster_project.io.writers import write_parquet_atomic

ASSETS_DIR = "assets"
WAREHOUSE = "assets/warehouse.duckdb"


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
    """assets/<group>/<asset>/<partition>.parquet (multi-partitions: .../<dim>=<v>/<dim>=<v>.parquet)."""
    return partition_dir(base, group, name) / f"{partition_relpath(partition_key)}.parquet"


def partition_files(base: str | Path, group: str, name: str) -> list[Path]:
    """Every stored partition of an asset (sorted); empty when it is not partitioned or not built."""
    folder = partition_dir(base, group, name)
    return sorted(folder.rglob("*.parquet")) if folder.is_dir() else []


def read_asset(base: str | Path, group: str, name: str) -> pl.DataFrame | None:
    """The whole asset as one frame: its Parquet file, or the union of all its partitions; None if absent."""
    path = asset_path(base, group, name)
    if path.exists():
        return pl.read_parquet(path)
    files = partition_files(base, group, name)
    if not files:
        return None
    return pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed")


@retry(retry=retry_if_exception_type(duckdb.IOException), stop=stop_after_delay(60),
       wait=wait_exponential(max=2), reraise=True)
def register_views(db_path: str | Path, views: dict[str, Path]) -> None:
    """CREATE OR REPLACE VIEW schema.name over each Parquet path (stored relative: works from the repo root).

    A folder (a partitioned asset) becomes a view over the union of every Parquet file below it,
    matched by column name, so `<group>.<asset>` shows all partitions' rows.
    """
    Path(db_path).parent.mkdir(parents=True, exist_ok=True)
    with duckdb.connect(str(db_path)) as con:
        for qualified, path in views.items():
            schema, name = qualified.split(".", 1)
            rel = os.path.relpath(path, Path.cwd()) if Path(path).is_absolute() else str(path)
            source = f"read_parquet('{rel}')"
            if Path(path).is_dir():
                source = f"read_parquet('{rel}/**/*.parquet', union_by_name = true, hive_partitioning = false)"
            con.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            con.execute(f"CREATE OR REPLACE VIEW \"{schema}\".\"{name}\" AS SELECT * FROM {source}")


def rebuild_views(base: str | Path = ASSETS_DIR, db_path: str | Path = WAREHOUSE) -> list[str]:
    """Register a view for every assets/<group>/<asset>.parquet on disk (after `dvc checkout`, say),
    and for every partitioned asset folder assets/<group>/<asset>/ holding Parquet files."""
    found = {f"{p.parent.name}.{p.stem}": p for p in sorted(Path(base).glob("*/*.parquet"))}
    for folder in sorted(Path(base).glob("*/*/")):
        if folder.is_dir() and f"{folder.parent.name}.{folder.name}" not in found and any(folder.rglob("*.parquet")):
            found[f"{folder.parent.name}.{folder.name}"] = folder
    if found:
        register_views(db_path, found)
    return sorted(found)


def prune_stale(group: str, since: float, base: str | Path = ASSETS_DIR, db_path: str | Path = WAREHOUSE) -> list[Path]:
    """After a complete run of ``group``: delete every file of assets/<group>/ not written since ``since`` (an
    epoch time), empty folders, and the views left without files. DVC keeps the group's folder in place
    (``persist: true``) so a failed or killed run leaves the last good outputs; this removes what a finished run
    no longer produces (dropped partitions, renamed assets, old exports). Returns the deleted files."""
    folder = Path(base) / group
    if not folder.is_dir():
        return []
    stale = sorted(p for p in folder.rglob("*") if (p.is_file() or p.is_symlink()) and p.lstat().st_mtime < since)
    for path in stale:
        path.unlink()
    for sub in sorted((d for d in folder.rglob("*") if d.is_dir()), key=lambda d: len(d.parts), reverse=True):
        if not any(sub.iterdir()):
            sub.rmdir()
    if stale and Path(db_path).exists():
        _drop_orphan_views(db_path, group, base)
    return stale


@retry(retry=retry_if_exception_type(duckdb.IOException), stop=stop_after_delay(60),
       wait=wait_exponential(max=2), reraise=True)
def _drop_orphan_views(db_path: str | Path, group: str, base: str | Path) -> None:
    """Drop the views of ``group`` whose Parquet file or partition folder is gone."""
    with duckdb.connect(str(db_path)) as con:
        names = [r[0] for r in con.execute("select view_name from duckdb_views() where schema_name = ? "
                                           "and not internal", [group]).fetchall()]
        for name in names:
            if not asset_path(base, group, name).exists() and not partition_files(base, group, name):
                con.execute(f'DROP VIEW "{group}"."{name}"')


def connect_readonly(db_path: str | Path = WAREHOUSE, assets_dir: str | Path = ASSETS_DIR) -> duckdb.DuckDBPyConnection:
    """The warehouse opened read-only and sandboxed: files are reachable only below ``assets_dir`` (the views'
    Parquet), no extension is installed or loaded, and the configuration is locked so a query cannot undo it."""
    if not Path(db_path).exists():
        raise FileNotFoundError(f"{db_path} does not exist yet: run `make demo` or materialize some assets first")
    con = duckdb.connect(str(db_path), read_only=True,
                         config={"autoinstall_known_extensions": False, "autoload_known_extensions": False,
                                 "allow_community_extensions": False})
    # allowed_directories can only be set once the database runs, and must be set before external access is off
    con.execute("SET allowed_directories = ?", [[str(Path(assets_dir).resolve()) + os.sep]])
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def query_only(sql: str) -> str:
    """``sql`` if it is exactly one SELECT statement (DuckDB's own parser decides), else ValueError: COPY TO
    could still write into the allowed assets folder, and every other statement type changes state."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as err:
        raise ValueError(str(err)) from None
    if len(statements) != 1:
        raise ValueError(f"expected exactly one query, got {len(statements)} statements")
    kind = statements[0].type
    if kind != duckdb.StatementType.SELECT:
        raise ValueError(f"only queries (SELECT, FROM, WITH, DESCRIBE, SHOW) are allowed, not {kind.name}")
    return sql


class WarehouseIOManager(dg.ConfigurableIOManager):
    """Stores each asset as assets/<group>/<asset>.parquet and keeps its DuckDB view current.

    Partitioned assets: one file per partition, assets/<group>/<asset>/<partition>.parquet, and the view
    is the union of all partitions. A downstream asset that reads a partitioned one gets the partitions
    Dagster asks for concatenated; partitions not materialized yet are skipped with a warning.
    """

    base_dir: str = ASSETS_DIR
    db_path: str = WAREHOUSE

    @staticmethod
    def _key(context: dg.OutputContext | dg.InputContext, key: str) -> str:
        """Multi-partition keys arrive as 'a|b' strings in some contexts: rebuild the per-dimension key."""
        pdef = context.asset_partitions_def
        if isinstance(pdef, dg.MultiPartitionsDefinition) and not hasattr(key, "keys_by_dimension"):
            return pdef.get_partition_key_from_str(key)
        return key

    def _path(self, key: dg.AssetKey) -> Path:
        if len(key.path) != 2:
            raise ValueError(f"asset key {key.to_user_string()} must be <group>/<asset>")
        return asset_path(self.base_dir, *key.path)

    def handle_output(self, context: dg.OutputContext, obj: pl.DataFrame) -> None:
        if not isinstance(obj, pl.DataFrame):
            raise TypeError(f"{context.asset_key.to_user_string()}: assets must return a polars DataFrame")
        self._path(context.asset_key)  # validates the key
        view = ".".join(context.asset_key.path)
        if context.has_asset_partitions:
            path = partition_path(self.base_dir, *context.asset_key.path,
                                  self._key(context, context.asset_partition_key))
            write_parquet_atomic(obj, path)
            register_views(self.db_path, {view: partition_dir(self.base_dir, *context.asset_key.path)})
            context.add_output_metadata({"rows": obj.height, "path": str(path), "view": view,
                                         "partition": str(context.asset_partition_key)})
            return
        path = self._path(context.asset_key)
        write_parquet_atomic(obj, path)
        register_views(self.db_path, {view: path})
        context.add_output_metadata({"rows": obj.height, "path": str(path), "view": view})

    def load_input(self, context: dg.InputContext) -> pl.DataFrame:
        name = context.asset_key.to_user_string()
        if context.has_asset_partitions:
            self._path(context.asset_key)
            keys = list(context.asset_partition_keys)
            paths = [partition_path(self.base_dir, *context.asset_key.path, self._key(context, k)) for k in keys]
            present = [p for p in paths if p.exists()]
            missing = [k for k, p in zip(keys, paths) if not p.exists()]
            if not present:
                raise FileNotFoundError(f"no partition of {name} is materialized yet (asked for {keys[:5]}...): "
                                        f"materialize {name} first")
            if missing:
                context.log.warning(f"{name}: {len(missing)} of {len(keys)} partitions not materialized, "
                                    f"skipped: {[str(k) for k in missing][:10]}")
            return pl.concat([pl.read_parquet(p) for p in present], how="diagonal_relaxed")
        path = self._path(context.asset_key)
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: materialize {name} first")
        return pl.read_parquet(path)
