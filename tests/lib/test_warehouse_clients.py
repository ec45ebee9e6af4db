"""The warehouse and the asset folders from users' own tools (issue 17 items 1, 4, 8): the PyPI DuckDB CLI from
another directory, partitioned assets as datasets in pandas, pyarrow, polars and DuckDB, `clarify sql --format`."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import duckdb
import pandas as pd
import polars as pl
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from dagster_project.cli import app
from dagster_project.lib.io_manager import WarehouseIOManager
from dagster_project.lib.warehouse import partition_dir, read_asset, rebuild_views, write_parquet_atomic

MULTI = dg.MultiPartitionsDefinition({"subject": dg.StaticPartitionsDefinition(["s1", "s2"]),
                                      "method": dg.StaticPartitionsDefinition(["base", "cot"])})
KEY = dg.AssetKey(["evaluation", "predictions"])
COLUMNS = {"id", "n", "subject", "method"}


def _cli() -> str | None:
    """The `duckdb` executable of the duckdb-cli package (dev extra), next to this interpreter or on PATH."""
    beside = Path(sys.executable).parent / "duckdb"
    return str(beside) if beside.exists() else shutil.which("duckdb")


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A project with a plain asset and a 3-partition asset written by the IO manager (partition columns in the
    frames, as the predictions asset returns them)."""
    monkeypatch.chdir(tmp_path)
    io_manager = WarehouseIOManager(base_dir="assets", db_path="assets/warehouse.duckdb")
    io_manager.handle_output(dg.build_output_context(asset_key=dg.AssetKey(["benchmark", "taxonomy"])),
                             pl.DataFrame({"label": ["lexical", "semantic"]}))
    for i, pk in enumerate(("base|s1", "cot|s1", "base|s2")):
        method, subject = pk.split("|")
        ctx = dg.build_output_context(asset_key=KEY, partition_key=MULTI.get_partition_key_from_str(pk),
                                      asset_partitions_def=MULTI)
        io_manager.handle_output(ctx, pl.DataFrame({"id": [2 * i, 2 * i + 1], "subject": [subject] * 2,
                                                    "method": [method] * 2, "n": [i, i]}))
    return tmp_path


def _rows(df: pd.DataFrame) -> list[tuple]:
    return sorted(tuple(str(r[c]) for c in sorted(COLUMNS)) for _, r in df.iterrows())


def test_every_reader_reads_a_partitioned_asset_folder_as_one_dataset(project):
    folder = partition_dir("assets", "evaluation", "predictions")
    ctx = dg.build_input_context(asset_key=KEY, asset_partitions_def=MULTI,
                                 asset_partition_key_range=dg.PartitionKeyRange("base|s1", "cot|s2"))
    loaded = WarehouseIOManager(base_dir="assets", db_path="assets/warehouse.duckdb").load_input(ctx)
    assert set(loaded.columns) == COLUMNS and loaded.height == 6
    expected = _rows(loaded.to_pandas())
    assert _rows(read_asset("assets", "evaluation", "predictions").to_pandas()) == expected

    readers = {
        "pandas": lambda: pd.read_parquet(folder),
        "pyarrow.parquet": lambda: pq.read_table(folder).to_pandas(),
        "pyarrow.dataset": lambda: ds.dataset(folder, format="parquet", partitioning="hive").to_table().to_pandas(),
        "polars": lambda: pl.scan_parquet(folder, hive_partitioning=True).collect().to_pandas(),
        "duckdb": lambda: duckdb.sql(f"select * from read_parquet('{folder}/**/*.parquet', "
                                     "hive_partitioning = true)").df(),
    }
    for name, read in readers.items():
        df = read()
        assert set(df.columns) == COLUMNS, name
        assert _rows(df) == expected, name


def test_legacy_partition_files_move_to_the_hive_layout(project):
    folder = partition_dir("assets", "evaluation", "predictions")
    legacy = folder / "method=cot" / "subject=s2.parquet"  # the layout of earlier runs: columns inside the file
    write_parquet_atomic(pl.DataFrame({"id": [9], "subject": ["s2"], "method": ["cot"], "n": [7]}), legacy)
    rebuild_views()
    assert not legacy.exists() and (folder / "method=cot" / "subject=s2" / "data.parquet").exists()
    assert pd.read_parquet(folder).shape == (7, 4)
    with duckdb.connect("assets/warehouse.duckdb", read_only=True) as con:
        assert con.execute("select n from evaluation.predictions where method = 'cot' and subject = 's2'"
                           ).fetchall() == [(7,)]


def test_partition_column_that_disagrees_with_its_partition_is_an_error(project):
    io_manager = WarehouseIOManager(base_dir="assets", db_path="assets/warehouse.duckdb")
    ctx = dg.build_output_context(asset_key=KEY, partition_key=MULTI.get_partition_key_from_str("cot|s2"),
                                  asset_partitions_def=MULTI)
    with pytest.raises(ValueError, match="'method' has 1 rows"):
        io_manager.handle_output(ctx, pl.DataFrame({"id": [1, 2], "method": ["cot", "base"]}))


def test_warehouse_is_in_a_format_duckdb_1x_reads(project):
    with duckdb.connect() as con:
        con.execute("ATTACH 'assets/warehouse.duckdb' AS wh (READ_ONLY)")
        tags = con.execute("select tags from duckdb_databases() where database_name = 'wh'").fetchone()[0]
    assert tags["storage_version"].startswith("v1.")


def test_a_warehouse_in_the_newer_format_is_rewritten_with_every_view(project):
    Path("assets/warehouse.duckdb").unlink()
    with duckdb.connect("assets/warehouse.duckdb") as con:  # duckdb 2.0's default format, as earlier runs wrote
        con.execute("create schema benchmark")
        con.execute("create view benchmark.taxonomy as select 1 as label")
    io_manager = WarehouseIOManager(base_dir="assets", db_path="assets/warehouse.duckdb")
    io_manager.handle_output(dg.build_output_context(asset_key=dg.AssetKey(["g", "new"])), pl.DataFrame({"a": [1]}))
    test_warehouse_is_in_a_format_duckdb_1x_reads(project)
    with duckdb.connect("assets/warehouse.duckdb", read_only=True) as con:
        assert con.execute("select count(*) from evaluation.predictions").fetchone()[0] == 6
        assert con.execute("select count(*) from benchmark.taxonomy").fetchone()[0] == 2
        assert con.execute("select a from g.new").fetchall() == [(1,)]


def test_pypi_duckdb_cli_opens_the_warehouse_from_another_directory(project, tmp_path_factory):
    cli = _cli()
    assert cli is not None, "the duckdb-cli package (dev extra) is not installed: pip install -e '.[dev]'"
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    db = (project / "assets" / "warehouse.duckdb").as_posix()
    query = ("select (select count(*) from benchmark.taxonomy) as labels, count(*) as rows, "
             "count(distinct method) as methods, count(distinct subject) as subjects from evaluation.predictions")
    done = subprocess.run([cli, "-readonly", "-csv", db, "-c", query], cwd=elsewhere, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert list(csv.DictReader(io.StringIO(done.stdout))) == [
        {"labels": "2", "rows": "6", "methods": "2", "subjects": "2"}]


def _sql(*args: str):
    return CliRunner().invoke(app, ["sql", *args, "select * from evaluation.predictions order by id"])


def test_sql_formats(project):
    n_by_id = [0, 0, 1, 1, 2, 2]
    out = _sql("--format", "csv")
    assert out.exit_code == 0, out.output
    rows = list(csv.DictReader(io.StringIO(out.output)))
    assert [int(r["n"]) for r in rows] == n_by_id and set(rows[0]) == COLUMNS

    out = _sql("--format", "json")
    assert out.exit_code == 0, out.output
    records = json.loads(out.output)
    assert [r["id"] for r in records] == list(range(6)) and set(records[0]) == COLUMNS

    out = _sql("--format", "ndjson")
    lines = [json.loads(line) for line in out.output.splitlines()]
    assert [r["n"] for r in lines] == n_by_id and set(lines[0]) == COLUMNS

    out = _sql("--format", "markdown")
    lines = out.output.splitlines()
    assert out.exit_code == 0 and len(lines) == 2 + 6, out.output
    assert [c.strip() for c in lines[0].strip("|").split("|")] == ["id", "n", "method", "subject"]
    assert set(lines[1]) <= set("|-: ") and all(line.startswith("|") for line in lines)

    out = CliRunner().invoke(app, ["sql", "--format", "markdown", "select 'a|b' as x, 'one\ntwo' as y"])
    assert out.output.splitlines()[2].split(" | ") == ["| a\\|b", "one<br>two |"], out.output

    out = _sql("--format", "table")
    assert out.exit_code == 0 and "method" in out.output and "cot" in out.output

    out = _sql("--format", "xml")
    assert out.exit_code == 2 and "--format" in out.output


def test_sql_column_cap_and_vertical_mode(project):
    out = _sql("--max-columns", "2")
    assert out.exit_code == 0, out.output
    assert "method" not in out.output.splitlines()[1]
    assert "2 more columns not shown: method, subject" in out.output
    out = _sql("--vertical")
    assert out.exit_code == 0, out.output
    assert out.output.count("-- row ") == 6
    assert "method: base" in out.output and " id: 5" in out.output
