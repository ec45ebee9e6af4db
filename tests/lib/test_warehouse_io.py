"""Parquet + DuckDB warehouse (lib/warehouse.py): atomic writes, absolute-path views, read-only access."""

from __future__ import annotations

import os
import stat

import dagster as dg
import duckdb
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from dagster_project.lib.bounded_sql import connect_readonly
from dagster_project.lib.io_manager import WarehouseIOManager
from dagster_project.lib.warehouse import VIEW_GLOB, asset_path, rebuild_views, register_views, write_parquet_atomic


def _view_sql(db, qualified: str) -> str:
    schema, name = qualified.split(".")
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("select sql from duckdb_views() where schema_name = ? and view_name = ?",
                           [schema, name]).fetchall()
    assert len(rows) == 1, f"view {qualified} not found"
    return rows[0][0]


def test_write_parquet_atomic_replaces_content_and_leaves_no_temp_files(tmp_path):
    path = tmp_path / "assets" / "g" / "a.parquet"  # parent folders do not exist yet
    first = pl.DataFrame({"id": [1, 2, 3], "text": ["a", "b", "c"]})
    write_parquet_atomic(first, path)
    assert_frame_equal(pl.read_parquet(path), first)

    second = pl.DataFrame({"id": [9], "text": ["z"], "extra": [True]})
    write_parquet_atomic(second, path)
    assert_frame_equal(pl.read_parquet(path), second)
    assert sorted(p.name for p in path.parent.iterdir()) == ["a.parquet"]


def test_failed_write_keeps_previous_file_and_cleans_up(tmp_path, monkeypatch):
    path = tmp_path / "g" / "a.parquet"
    good = pl.DataFrame({"id": [1, 2]})
    write_parquet_atomic(good, path)
    before = path.read_bytes()

    def half_written(self, file, *args, **kwargs):
        with open(file, "wb") as fh:
            fh.write(b"PAR1 truncated garbage")
        raise OSError("disk full")

    monkeypatch.setattr(pl.DataFrame, "write_parquet", half_written)
    with pytest.raises(OSError, match="disk full"):
        write_parquet_atomic(pl.DataFrame({"id": [3, 4, 5]}), path)

    assert path.read_bytes() == before
    monkeypatch.undo()
    assert_frame_equal(pl.read_parquet(path), good)
    assert sorted(p.name for p in path.parent.iterdir()) == ["a.parquet"]


def test_atomic_write_keeps_the_permissions_of_a_plain_write(tmp_path):
    old = os.umask(0o022)
    try:
        plain = tmp_path / "plain.parquet"
        pl.DataFrame({"id": [1]}).write_parquet(plain)
        atomic = tmp_path / "g" / "atomic.parquet"
        write_parquet_atomic(pl.DataFrame({"id": [1]}), atomic)
    finally:
        os.umask(old)
    assert stat.S_IMODE(atomic.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode)


def test_register_views_stores_absolute_path_and_clarify_views_follows_a_move(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    df = pl.DataFrame({"k": ["x", "y"], "v": [1, 2]})
    path = (tmp_path / "assets" / "grp" / "tbl.parquet").resolve()  # absolute on purpose
    write_parquet_atomic(df, path)
    db = tmp_path / "assets" / "warehouse.duckdb"
    register_views(db, {"grp.tbl": path})

    assert f"'{path.as_posix()}'" in _view_sql(db, "grp.tbl")

    with connect_readonly(db) as con:
        assert con.execute("select sum(v) from grp.tbl").fetchone()[0] == 3

    # re-registering replaces the view (no "already exists"), and it reads the new file content
    write_parquet_atomic(pl.DataFrame({"k": ["z"], "v": [40]}), path)
    register_views(db, {"grp.tbl": path})
    with connect_readonly(db) as con:
        assert con.execute("select sum(v) from grp.tbl").fetchone()[0] == 40

    # the whole folder moves (a clone elsewhere): `clarify views` records the new paths
    moved = tmp_path / "clone"
    moved.mkdir()
    (tmp_path / "assets").rename(moved / "assets")
    monkeypatch.chdir(moved)
    rebuild_views()
    with connect_readonly("assets/warehouse.duckdb") as con:
        assert con.execute("select sum(v) from grp.tbl").fetchone()[0] == 40


def test_connect_readonly_refuses_writes_and_missing_db(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_parquet_atomic(pl.DataFrame({"a": [1]}), tmp_path / "assets" / "g" / "t.parquet")
    register_views("assets/warehouse.duckdb", {"g.t": tmp_path / "assets" / "g" / "t.parquet"})
    with connect_readonly("assets/warehouse.duckdb") as con:
        assert con.execute("select count(*) from g.t").fetchone()[0] == 1
        with pytest.raises(duckdb.Error, match="read-only"):
            con.execute("create table g.scratch (a int)")
        with pytest.raises(duckdb.Error, match="read-only"):
            con.execute("drop view g.t")
    with pytest.raises(FileNotFoundError, match="nothing_here.duckdb"):
        connect_readonly(tmp_path / "nothing_here.duckdb")
    assert not (tmp_path / "nothing_here.duckdb").exists()


def test_rebuild_views_finds_every_group_asset_parquet(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_parquet_atomic(pl.DataFrame({"n": [1, 2]}), asset_path("assets", "benchmark", "queries"))
    write_parquet_atomic(pl.DataFrame({"n": [5]}), asset_path("assets", "evaluation", "predictions"))
    (tmp_path / "assets" / "top_level.parquet").write_bytes(b"not an asset")  # not <group>/<asset>
    (tmp_path / "assets" / "benchmark" / "notes.txt").write_text("ignored")

    found = rebuild_views("assets", "assets/warehouse.duckdb")
    assert found == ["benchmark.queries", "evaluation.predictions"]
    with connect_readonly("assets/warehouse.duckdb") as con:
        assert con.execute("select sum(n) from benchmark.queries").fetchone()[0] == 3
        assert con.execute("select sum(n) from evaluation.predictions").fetchone()[0] == 5
    assert f"'{(tmp_path / 'assets/benchmark/queries.parquet').resolve().as_posix()}'" in _view_sql(
        "assets/warehouse.duckdb", "benchmark.queries")

    assert rebuild_views(tmp_path / "empty", tmp_path / "none.duckdb") == []
    assert not (tmp_path / "none.duckdb").exists()


def test_io_manager_round_trip_registers_view(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    io = WarehouseIOManager(base_dir="assets", db_path="assets/warehouse.duckdb")
    key = dg.AssetKey(["grp", "things"])
    df = pl.DataFrame({"id": ["a", "b", "c"], "score": [1.0, 2.5, None]})
    out = dg.build_output_context(asset_key=key)
    io.handle_output(out, df)

    assert (tmp_path / "assets" / "grp" / "things.parquet").exists()
    assert_frame_equal(io.load_input(dg.build_input_context(asset_key=key)), df)
    with connect_readonly("assets/warehouse.duckdb") as con:
        assert con.execute("select count(*) from grp.things").fetchone()[0] == 3
    meta = out.get_logged_metadata()
    assert meta["dagster/row_count"].value == 3 and meta["view"].value == "grp.things"


def test_io_manager_rejects_non_polars_and_bad_keys(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    io = WarehouseIOManager(base_dir="assets", db_path="assets/warehouse.duckdb")
    with pytest.raises(TypeError, match="polars"):
        io.handle_output(dg.build_output_context(asset_key=dg.AssetKey(["grp", "x"])),
                         pl.DataFrame({"a": [1]}).to_pandas())
    with pytest.raises(TypeError, match="grp/x"):
        io.handle_output(dg.build_output_context(asset_key=dg.AssetKey(["grp", "x"])), [{"a": 1}])
    assert not (tmp_path / "assets").exists()

    with pytest.raises(ValueError, match="<group>/<asset>"):
        io.handle_output(dg.build_output_context(asset_key=dg.AssetKey(["flat"])), pl.DataFrame({"a": [1]}))
    with pytest.raises(FileNotFoundError, match="grp/missing"):
        io.load_input(dg.build_input_context(asset_key=dg.AssetKey(["grp", "missing"])))


# --------------------------------------------------------------------------- partitioned assets

from dagster_project.lib.warehouse import partition_path, read_asset

MULTI = dg.MultiPartitionsDefinition({"subject": dg.StaticPartitionsDefinition(["s1", "s2"]),
                                      "method": dg.StaticPartitionsDefinition(["base", "cot"])})


def _out(key, pk):
    return dg.build_output_context(asset_key=key, partition_key=pk, asset_partitions_def=MULTI)


def test_partition_paths():
    pk = MULTI.get_partition_key_from_str("base|s1")
    assert partition_path("assets", "g", "a", pk).as_posix() == "assets/g/a/method=base/subject=s1/data.parquet"
    assert partition_path("assets", "logs", "raw", "2024-05-01").as_posix() == "assets/logs/raw/2024-05-01.parquet"
    with pytest.raises(ValueError, match="file name"):
        partition_path("assets", "g", "a", "../escape")


def test_io_manager_partitions_round_trip_and_union_view(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    io = WarehouseIOManager(base_dir="assets", db_path="assets/warehouse.duckdb")
    key = dg.AssetKey(["evaluation", "predictions"])
    for pk, extra in (("base|s1", {}), ("cot|s1", {"trace": ["t"]}), ("base|s2", {})):
        method, subject = pk.split("|")
        io.handle_output(_out(key, MULTI.get_partition_key_from_str(pk)),
                         pl.DataFrame({"subject": [subject], "method": [method], "n": [1], **extra}))
    files = sorted(p.relative_to(tmp_path).as_posix() for p in (tmp_path / "assets").rglob("*.parquet"))
    assert files == ["assets/evaluation/predictions/method=base/subject=s1/data.parquet",
                     "assets/evaluation/predictions/method=base/subject=s2/data.parquet",
                     "assets/evaluation/predictions/method=cot/subject=s1/data.parquet"]
    # the view is the union of every partition, columns matched by name (cot has an extra column)
    with connect_readonly("assets/warehouse.duckdb") as con:
        assert con.execute("select count(*), count(trace) from evaluation.predictions").fetchone() == (3, 1)
    assert f"{tmp_path.resolve().as_posix()}/assets/evaluation/predictions/{VIEW_GLOB}" in _view_sql(
        "assets/warehouse.duckdb", "evaluation.predictions")
    # a downstream asset asking for all partitions gets the ones that exist ("cot|s2" is not built yet)
    ctx = dg.build_input_context(asset_key=key, asset_partitions_def=MULTI,
                                 asset_partition_key_range=dg.PartitionKeyRange("base|s1", "cot|s2"))
    df = io.load_input(ctx)
    assert df.height == 3 and set(df["method"]) == {"base", "cot"}
    whole = read_asset("assets", "evaluation", "predictions")
    assert whole.height == 3 and read_asset("assets", "evaluation", "nothing") is None
    # rebuild_views also finds the partitioned folder
    assert "evaluation.predictions" in rebuild_views("assets", "assets/other.duckdb")


def test_an_input_can_ask_for_some_columns_only(tmp_path, monkeypatch):
    """AssetIn metadata 'columns': only those are read, hive partition columns included, in the order asked."""
    from dagster_project.lib.warehouse import COLUMNS

    monkeypatch.chdir(tmp_path)
    io = WarehouseIOManager(base_dir="assets", db_path="assets/warehouse.duckdb")
    key = dg.AssetKey(["evaluation", "predictions"])
    for pk in ("base|s1", "cot|s1"):
        method, subject = pk.split("|")
        io.handle_output(_out(key, MULTI.get_partition_key_from_str(pk)),
                         pl.DataFrame({"subject": [subject], "method": [method], "n": [1], "trace": ["long"]}))

    def load(columns, key=key, partitioned=True):
        extra = {"asset_partitions_def": MULTI, "asset_partition_key_range": dg.PartitionKeyRange("base|s1", "cot|s1")}
        return io.load_input(dg.build_input_context(asset_key=key, definition_metadata={COLUMNS: columns},
                                                    **(extra if partitioned else {})))

    df = load(["n", "method"])
    assert df.columns == ["n", "method"] and sorted(df["method"]) == ["base", "cot"]
    with pytest.raises(KeyError, match=r"data.parquet has no column\(s\) \['nope'\].*'columns' metadata"):
        load(["n", "nope"])
    plain = dg.AssetKey(["g", "plain"])
    io.handle_output(dg.build_output_context(asset_key=plain), pl.DataFrame({"a": [1], "b": ["x"], "c": [2.0]}))
    assert load(["c", "a"], plain, partitioned=False).to_dicts() == [{"c": 2.0, "a": 1}]
    with pytest.raises(KeyError, match="plain.parquet has no column"):
        load(["z"], plain, partitioned=False)


def test_io_manager_no_partition_built_is_an_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    io = WarehouseIOManager(base_dir="assets", db_path="assets/warehouse.duckdb")
    ctx = dg.build_input_context(asset_key=dg.AssetKey(["g", "p"]), asset_partitions_def=MULTI,
                                 asset_partition_key_range=dg.PartitionKeyRange("base|s1", "cot|s2"))
    with pytest.raises(FileNotFoundError, match="no partition of g/p"):
        io.load_input(ctx)
