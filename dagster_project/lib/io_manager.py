"""The Dagster IO manager of the warehouse: each asset stored as Parquet under assets/<group>/ (partitions as
hive-style files), published with its DuckDB view (lib/warehouse.publish), with catalog metadata per materialization."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import dagster as dg
import polars as pl
import pyarrow.parquet as pq

from dagster_project.io.writers import staged_path
from dagster_project.lib.catalog import PREVIEW_MAX_ROWS, table_metadata
from dagster_project.lib.warehouse import (
    ASSETS_DIR,
    COLUMNS,
    WAREHOUSE,
    asset_path,
    migrate_legacy_partitions,
    partition_dir,
    partition_path,
    partition_values,
    project,
    publish,
    read_columns,
    read_partition,
    strip_partition_columns,
)

LAZY = "lazy"  # AssetIn metadata key: load a partitioned input as {partition key: Parquet path}


def read_if_small(path: Path) -> pl.DataFrame:
    """A stored Parquet file as a frame when a catalog preview could show it, else an empty frame of its schema
    (what table_metadata needs); the row count comes from the file's metadata."""
    if pq.ParquetFile(path).metadata.num_rows <= PREVIEW_MAX_ROWS:
        return pl.read_parquet(path)
    return pl.DataFrame(schema=pl.read_parquet_schema(path))


def stage_partition(part: pl.DataFrame | Path, path: Path, values: dict[str, str], where: str) -> tuple[Path, int]:
    """Write one partition to a temp file beside ``path`` for publish to rename into place: a frame, or a staged
    Parquet file moved there (copied when it is on another filesystem; rewritten when hive partition columns must be
    stripped). Returns (the temp file, its row count)."""
    if isinstance(part, pl.DataFrame):
        rows, frame = part.height, strip_partition_columns(part, values, where)
    else:
        rows = pq.ParquetFile(part).metadata.num_rows
        frame = strip_partition_columns(pl.read_parquet(part), values, where) if values else None
    with staged_path(path, ".parquet") as tmp:
        if frame is not None:
            frame.write_parquet(tmp)
        else:
            try:
                os.replace(part, tmp)
            except OSError:  # another filesystem
                shutil.copyfile(part, tmp)
    return tmp, rows


def store_partitions(db_path: str | Path, view: str, folder: Path, parts: dict[Path, pl.DataFrame | Path],
                     where: str) -> int:
    """Write the partitions ({target path: frame or staged Parquet file}) of the asset whose view is ``view`` over
    ``folder``, then publish them and the view at once. Returns the rows written."""
    staged: dict[Path, Path] = {}
    rows = 0
    try:
        for path, part in parts.items():
            tmp, n = stage_partition(part, path, partition_values(folder, path), where)
            staged[tmp] = path
            rows += n
    except BaseException:
        for tmp in staged:
            tmp.unlink(missing_ok=True)
        raise
    publish(db_path, staged, {view: folder})
    return rows


class WarehouseIOManager(dg.ConfigurableIOManager):
    """Stores each asset as assets/<group>/<asset>.parquet, keeps its DuckDB view current, and records the
    catalog metadata (row count, column schema, preview: lib/catalog.py) on every materialization.

    Partitioned assets: one file per partition, assets/<group>/<asset>/<dim>=<value>/.../data.parquet, and the view
    is the union of all partitions. A run over a partition range (BackfillPolicy.single_run) returns
    {partition key: frame} and gets one file per key. A downstream asset that reads a partitioned one gets the
    partitions Dagster asks for concatenated; partitions not materialized yet are skipped with a warning. An input whose
    AssetIn metadata sets LAZY gets {partition key: Parquet path} instead, to stream the partitions itself; an
    output may hold a Path per key (a Parquet file the asset streamed), which is moved into place.
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

    def handle_output(self, context: dg.OutputContext, obj: pl.DataFrame | dict[str, pl.DataFrame]) -> None:
        name = context.asset_key.to_user_string()
        self._path(context.asset_key)  # validates the key
        view = ".".join(context.asset_key.path)
        if context.has_asset_partitions:
            parts = self._by_partition(context, obj)
            folder = partition_dir(self.base_dir, *context.asset_key.path)
            migrate_legacy_partitions(folder)
            by_path = {partition_path(self.base_dir, *context.asset_key.path, self._key(context, key)): part
                       for key, part in parts.items()}
            rows = store_partitions(self.db_path, view, folder, by_path, name)
            paths = list(by_path)
            keys = [str(k) for k in parts]
            first = next(iter(parts.values()))
            meta = table_metadata(first if isinstance(first, pl.DataFrame) else read_if_small(paths[0]), name)
            if len(parts) > 1:  # a range: first day's schema, rows of all
                meta = {**meta, "dagster/row_count": rows}
                meta.pop("preview", None)
            context.add_output_metadata({**meta, "view": view,
                                         **({"path": str(paths[0]), "partition": keys[0]} if len(keys) == 1 else
                                            {"path": str(folder), "partitions": len(keys),
                                             "partition_range": f"{keys[0]}..{keys[-1]}"})})
            return
        if not isinstance(obj, pl.DataFrame):
            raise TypeError(f"{name}: assets must return a polars DataFrame")
        path = self._path(context.asset_key)
        with staged_path(path, ".parquet") as tmp:
            obj.write_parquet(tmp)
        publish(self.db_path, {tmp: path}, {view: path})
        context.add_output_metadata({**table_metadata(obj, context.asset_key.to_user_string()),
                                     "path": str(path), "view": view})

    @staticmethod
    def _by_partition(context: dg.OutputContext, obj: object) -> dict[str, pl.DataFrame | Path]:
        """{partition key: frame or staged Parquet file} for a partitioned output: a run of one partition may return
        a bare frame; a run of a partition range (a single-run backfill) returns a dict holding exactly the run's
        keys. A Path is a Parquet file the asset already wrote (streamed): it is moved into place."""
        name = context.asset_key.to_user_string()
        keys = list(context.asset_partition_keys)
        if isinstance(obj, pl.DataFrame) and len(keys) == 1:
            return {keys[0]: obj}
        if not isinstance(obj, dict):
            raise TypeError(f"{name}: a run of {len(keys)} partitions must return a dict {{partition key: polars "
                            f"DataFrame}}, got {type(obj).__name__}")
        if set(obj) != set(keys) or not all(isinstance(v, pl.DataFrame | Path) for v in obj.values()):
            raise ValueError(f"{name}: the returned partitions {sorted(map(str, obj))[:5]} must be exactly the run's "
                             f"{sorted(map(str, keys))[:5]} ({len(keys)} keys), each a polars DataFrame or the Path "
                             "of a Parquet file")
        return {k: obj[k] for k in keys}

    def load_input(self, context: dg.InputContext) -> pl.DataFrame | dict[str, Path]:
        name = context.asset_key.to_user_string()
        meta = context.definition_metadata or {}
        columns = meta.get(COLUMNS)  # None: every column
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
            if meta.get(LAZY):
                return {str(k): p.resolve() for k, p in zip(keys, paths, strict=True) if p.exists()}
            folder = partition_dir(self.base_dir, *context.asset_key.path)
            return pl.concat([read_partition(folder, p, columns) for p in present], how="diagonal_relaxed")
        path = self._path(context.asset_key)
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: materialize {name} first")
        return project(read_columns(path, columns), columns, path)
