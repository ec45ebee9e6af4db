"""Streamed per-partition Parquet (io.writers.PartitionWriters) and the IO manager's staged-file outputs and lazy
inputs (lib/warehouse.py): what lets a run over many log days keep only one read batch in memory."""

from __future__ import annotations

import dagster as dg
import polars as pl
import pyarrow.parquet as pq
import pytest
from polars.testing import assert_frame_equal

from dagster_project.io.writers import PartitionWriters
from dagster_project.lib.bounded_sql import connect_readonly
from dagster_project.lib.io_manager import LAZY, WarehouseIOManager
from dagster_project.lib.warehouse import read_row_groups

SCHEMA = {"conv": pl.Utf8, "turn": pl.Int64}


def _conv(cid: str, n: int) -> pl.DataFrame:
    return pl.DataFrame({"conv": [cid] * n, "turn": list(range(n))}, schema=SCHEMA)


def test_frames_are_never_split_across_row_groups_and_empty_keys_get_a_file(tmp_path):
    w = PartitionWriters(tmp_path, ["a", "b", "c"], SCHEMA, row_group_rows=4)
    for cid, n in (("x", 3), ("y", 3), ("z", 2), ("w", 5)):
        w.write("a", _conv(cid, n))
    w.write("b", _conv("v", 1))
    files = w.close()
    assert sorted(files) == ["a", "b", "c"] and all(p.exists() for p in files.values())
    groups = [g["conv"].unique(maintain_order=True).to_list() for g in read_row_groups(files["a"])]
    assert groups == [["x", "y"], ["z", "w"]]  # flushed once >= 4 rows were buffered; no conversation split
    assert_frame_equal(pl.read_parquet(files["a"]), pl.concat([_conv("x", 3), _conv("y", 3), _conv("z", 2),
                                                               _conv("w", 5)]))
    assert pl.read_parquet(files["b"]).height == 1
    empty = pl.read_parquet(files["c"])
    assert empty.height == 0 and empty.schema == pl.Schema(SCHEMA)
    with pytest.raises(KeyError, match="'d' is not one of the 3"):
        PartitionWriters(tmp_path / "other", ["a", "b", "c"], SCHEMA, 4).write("d", _conv("x", 1))


DAYS = dg.StaticPartitionsDefinition(["2024-05-01", "2024-05-02"])


def test_io_manager_moves_a_staged_partition_file_into_place_and_loads_lazily(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    io = WarehouseIOManager(base_dir="assets", db_path="assets/warehouse.duckdb")
    key = dg.AssetKey(["logs", "raw"])
    w = PartitionWriters(tmp_path / "stage", ["2024-05-01"], SCHEMA, row_group_rows=2)
    w.write("2024-05-01", _conv("x", 3))
    staged = w.close()
    out = dg.build_output_context(asset_key=key, partition_key="2024-05-01", asset_partitions_def=DAYS)
    io.handle_output(out, staged)
    stored = tmp_path / "assets/logs/raw/2024-05-01.parquet"
    assert not staged["2024-05-01"].exists() and pq.ParquetFile(stored).metadata.num_rows == 3
    meta = out.get_logged_metadata()
    assert meta["dagster/row_count"].value == 3 and [c.name for c in meta["dagster/column_schema"].schema.columns] \
        == ["conv", "turn"]
    with connect_readonly("assets/warehouse.duckdb") as con:
        assert con.execute("select count(*) from logs.raw").fetchone()[0] == 3
    rng = dg.PartitionKeyRange("2024-05-01", "2024-05-02")
    lazy = io.load_input(dg.build_input_context(asset_key=key, asset_partitions_def=DAYS,
                                                asset_partition_key_range=rng, definition_metadata={LAZY: True}))
    assert lazy == {"2024-05-01": stored.resolve()}  # 05-02 is not built: skipped, as the eager load does
    eager = io.load_input(dg.build_input_context(asset_key=key, asset_partitions_def=DAYS,
                                                 asset_partition_key_range=rng))
    assert_frame_equal(eager, _conv("x", 3))


def test_io_manager_refuses_a_value_that_is_neither_frame_nor_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    io = WarehouseIOManager(base_dir="assets", db_path="assets/warehouse.duckdb")
    out = dg.build_output_context(asset_key=dg.AssetKey(["logs", "raw"]), partition_key="2024-05-01",
                                  asset_partitions_def=DAYS)
    with pytest.raises(ValueError, match="polars DataFrame or the Path"):
        io.handle_output(out, {"2024-05-01": "not a path"})
