"""Parquet IO manager (atomic writes) + DuckDB views `<group>.<asset>` over the Parquet files."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import dagster as dg
import duckdb
import polars as pl
from tenacity import retry, retry_if_exception_type, stop_after_delay, wait_exponential

ASSETS_DIR = "assets"
WAREHOUSE = "assets/warehouse.duckdb"


def asset_path(base: str | Path, group: str, name: str) -> Path:
    return Path(base) / group / f"{name}.parquet"


def write_parquet_atomic(df: pl.DataFrame, path: Path) -> None:
    """Write to a temp file in the same folder, then rename: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file a plain write's permissions
    try:
        df.write_parquet(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@retry(retry=retry_if_exception_type(duckdb.IOException), stop=stop_after_delay(60),
       wait=wait_exponential(max=2), reraise=True)
def register_views(db_path: str | Path, views: dict[str, Path]) -> None:
    """CREATE OR REPLACE VIEW schema.name over each Parquet path (stored relative: works from the repo root)."""
    Path(db_path).parent.mkdir(parents=True, exist_ok=True)
    with duckdb.connect(str(db_path)) as con:
        for qualified, path in views.items():
            schema, name = qualified.split(".", 1)
            rel = os.path.relpath(path, Path.cwd()) if Path(path).is_absolute() else str(path)
            con.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            con.execute(f"CREATE OR REPLACE VIEW \"{schema}\".\"{name}\" AS SELECT * FROM read_parquet('{rel}')")


def rebuild_views(base: str | Path = ASSETS_DIR, db_path: str | Path = WAREHOUSE) -> list[str]:
    """Register a view for every assets/<group>/<asset>.parquet on disk (after `dvc checkout`, say)."""
    found = {f"{p.parent.name}.{p.stem}": p for p in sorted(Path(base).glob("*/*.parquet"))}
    if found:
        register_views(db_path, found)
    return sorted(found)


def connect_readonly(db_path: str | Path = WAREHOUSE) -> duckdb.DuckDBPyConnection:
    if not Path(db_path).exists():
        raise FileNotFoundError(f"{db_path} does not exist yet: run `make demo` or materialize some assets first")
    return duckdb.connect(str(db_path), read_only=True)


class WarehouseIOManager(dg.ConfigurableIOManager):
    """Stores each asset as assets/<group>/<asset>.parquet and keeps its DuckDB view current."""

    base_dir: str = ASSETS_DIR
    db_path: str = WAREHOUSE

    def _path(self, key: dg.AssetKey) -> Path:
        if len(key.path) != 2:
            raise ValueError(f"asset key {key.to_user_string()} must be <group>/<asset>")
        return asset_path(self.base_dir, *key.path)

    def handle_output(self, context: dg.OutputContext, obj: pl.DataFrame) -> None:
        if not isinstance(obj, pl.DataFrame):
            raise TypeError(f"{context.asset_key.to_user_string()}: assets must return a polars DataFrame")
        path = self._path(context.asset_key)
        write_parquet_atomic(obj, path)
        register_views(self.db_path, {".".join(context.asset_key.path): path})
        context.add_output_metadata({"rows": obj.height, "path": str(path), "view": ".".join(context.asset_key.path)})

    def load_input(self, context: dg.InputContext) -> pl.DataFrame:
        path = self._path(context.asset_key)
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: materialize {context.asset_key.to_user_string()} first")
        return pl.read_parquet(path)
