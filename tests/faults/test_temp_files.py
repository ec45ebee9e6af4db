"""No reader sees a writer's temp file (issue 29 item 1): temp files are named '.<name>.<random><suffix>.tmp', the
views glob only visible '*.parquet' files, `clarify views` names and leaves out unreadable files, and a group's run
first removes the temp files a killed writer left."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
from typer.testing import CliRunner

from dagster_project.cli import app
from dagster_project.io.writers import atomic_path, is_temp_file
from dagster_project.lib.io_manager import WarehouseIOManager
from dagster_project.lib.warehouse import (
    partition_path,
    rebuild_views,
    remove_leftover_temp_files,
    write_parquet_atomic,
)
from dagster_project.runs.group_runs import materialize_group

DAYS = ("2024-05-01", "2024-05-02")
TAXONOMY = Path("assets/benchmark/taxonomy.parquet")
# what a writer killed between create and rename leaves: this version's name and the earlier one's (which ended
# in .parquet and so matched the views' glob)
LEFTOVERS = (".2024-05-01.parquet.k2x9_a0b.parquet.tmp", ".2024-05-01.parquet.q8v1m3zz.parquet")


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A plain asset and a partitioned one (two days of two rows) with their views."""
    monkeypatch.chdir(tmp_path)
    write_parquet_atomic(pl.DataFrame({"label": ["lexical", "semantic"]}), TAXONOMY)
    for day in DAYS:
        write_parquet_atomic(pl.DataFrame({"t": [1, 2]}), partition_path("assets", "logs", "raw_logs", day))
    rebuild_views()
    return tmp_path


def plant_leftovers() -> list[Path]:
    """Empty temp files in the partition folder and beside the plain asset, as a kill -9 leaves them."""
    planted = [Path("assets/logs/raw_logs", name) for name in LEFTOVERS]
    planted.append(TAXONOMY.parent / ".taxonomy.parquet.ab12cd34.parquet")
    for path in planted:
        path.touch()
    return planted


def cli(*args: str):
    return CliRunner().invoke(app, list(args))


def test_temp_files_end_in_tmp_and_are_recognised(tmp_path):
    target = tmp_path / "g" / "a.parquet"
    with atomic_path(target, ".parquet") as tmp:
        assert tmp.parent == target.parent and tmp.name.startswith(f".a.parquet.w{os.getpid()}.")
        assert tmp.name.endswith(".tmp")
        assert is_temp_file(tmp)
        tmp.write_bytes(b"x")
    assert [p.name for p in target.parent.iterdir()] == ["a.parquet"]
    for name in (*LEFTOVERS, ".taxonomy.parquet.ab12cd34.parquet", ".dagster.yaml.abcd_123.yaml.tmp"):
        assert is_temp_file(Path(name)), name
    for name in ("data.parquet", "2024-05-01.parquet", ".gitignore", ".dvc", "a.parquet.tmp"):
        assert not is_temp_file(Path(name)), name


def test_sql_and_views_succeed_with_empty_temp_files_in_the_table_folders(project):
    planted = plant_leftovers()
    for query, expected in (("select count(*) as n from logs.raw_logs", "4"),
                            ("select count(*) as n from benchmark.taxonomy", "2")):
        result = cli("sql", "--csv", query)
        assert result.exit_code == 0, result.output
        assert result.output.split() == ["n", expected]
    result = cli("views")
    assert result.exit_code == 0, result.output
    assert "2 views" in result.output and "benchmark.taxonomy, logs.raw_logs" in result.output
    assert cli("sql", "--csv", "select count(*) as n from logs.raw_logs").output.split() == ["n", "4"]
    assert all(p.exists() for p in planted)  # views leave them alone; a run of the group removes them


def test_views_name_and_leave_out_unreadable_files(project):
    Path("assets/logs/raw_logs/2024-05-03.parquet").write_bytes(b"PAR1 cut off")
    Path("assets/benchmark/broken.parquet").touch()
    result = CliRunner().invoke(app, ["views"], terminal_width=400)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert re.search(r"skipped \S*assets/logs/raw_logs/2024-05-03\.parquet \(view logs\.raw_logs\)", text), text
    assert re.search(r"skipped \S*assets/benchmark/broken\.parquet \(view benchmark\.broken\)", text), text
    assert "2 views" in text and "Traceback" not in text
    # the view lists the two readable days; the broken plain asset gets no view
    assert cli("sql", "--csv", "select count(*) as n from logs.raw_logs").output.split() == ["n", "4"]
    assert cli("sql", "--csv", "select * from benchmark.broken").exit_code == 1
    # once the file is good again, the view covers the folder (later partitions included)
    write_parquet_atomic(pl.DataFrame({"t": [7]}), Path("assets/logs/raw_logs/2024-05-03.parquet"))
    assert sorted(rebuild_views()) == ["benchmark.taxonomy", "logs.raw_logs"]
    write_parquet_atomic(pl.DataFrame({"t": [8]}), Path("assets/logs/raw_logs/2024-05-04.parquet"))
    assert cli("sql", "--csv", "select count(*) as n from logs.raw_logs").output.split() == ["n", "6"]


def test_only_leftovers_older_than_the_process_are_removed(project):
    old, fresh = plant_leftovers()[:2]
    os.utime(old, (1_000_000_000, 1_000_000_000))  # 2001: before this process started
    removed = remove_leftover_temp_files("logs")
    assert removed == [old] and not old.exists()
    assert fresh.exists()  # modified now: a write in flight in another process keeps its temp file
    left = sorted(p.name for p in Path("assets/logs/raw_logs").iterdir())
    assert left == [fresh.name, *(f"{d}.parquet" for d in DAYS)]


DAY_PARTS = dg.StaticPartitionsDefinition(list(DAYS))


@dg.asset(key=["logs", "raw_logs"], group_name="logs", partitions_def=DAY_PARTS)
def raw_logs() -> pl.DataFrame:
    return pl.DataFrame({"t": [10, 20, 30]})


def test_a_rerun_after_a_killed_write_succeeds_and_removes_the_leftovers(project):
    """A kill between create and rename left temp files (of both name forms) in the table folders; the next run
    of the group removes them first, writes every partition, and the views and `clarify sql` read the new rows."""
    planted = plant_leftovers()
    for path in planted:
        os.utime(path, (1_000_000_000, 1_000_000_000))
    defs = dg.Definitions(assets=[raw_logs], resources={"io_manager": WarehouseIOManager()})
    said: list[str] = []
    with dg.DagsterInstance.ephemeral() as instance:
        results = materialize_group(defs, "logs", instance, say=said.append)
    assert results and all(r.success for r in results)
    assert sum("a temp file left by a killed writer" in line for line in said) == 2  # the logs group's two
    assert not any(p.exists() for p in planted[:2]) and planted[2].exists()  # another group's: its own run's job
    result = cli("sql", "--csv", "select count(*) as n, sum(t) as s from logs.raw_logs")
    assert result.output.split() == ["n,s", "6,120"]
    assert cli("views").exit_code == 0


def test_stored_days_and_the_report_index_ignore_temp_files(project):
    from dagster_project.defs.logs.partitions import stored_days
    from dagster_project.reporting.report_index import asset_rows

    plant_leftovers()
    assert stored_days("assets") == list(DAYS)
    logs = asset_rows("assets", "logs")
    assert (logs["asset"].to_list(), logs["rows"].to_list(), logs["partitions"].to_list()) == (["raw_logs"], [4], [2])
    assert asset_rows("assets", "benchmark")["asset"].to_list() == ["taxonomy"]


def test_a_staged_file_whose_writer_still_runs_is_kept_however_old(project):
    """A run's staged partitions wait for the warehouse's write lock while a query runs (lib/warehouse.publish): a
    run of the group started meanwhile must not take them for a killed writer's leftovers."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    folder = Path("assets/logs/raw_logs")
    waiting = folder / f".2024-05-01.parquet.w{os.getpid()}.k2x9_a0b.parquet.tmp"  # this process: alive
    killed = folder / f".2024-05-02.parquet.w{gone.stdout.strip()}.q8v1m3zz.parquet.tmp"
    for path in (waiting, killed):
        path.touch()
        os.utime(path, (1_000_000_000, 1_000_000_000))
    assert remove_leftover_temp_files("logs") == [killed]
    assert waiting.exists() and not killed.exists()
