"""Publishing partitions (lib/warehouse.publish): a staged file replaces its target only under the warehouse's
write lock, which a `clarify sql` query holds (read-only) for its whole run, so the query never reads a Parquet file
replaced between DuckDB's bind and scan (the flake of tests/faults/test_concurrent_readers.py, 2026-11-28)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import duckdb
import polars as pl
import pytest

from dagster_project.lib import warehouse
from dagster_project.lib.io_manager import store_partitions
from dagster_project.lib.warehouse import partition_dir, partition_path


HOLD_QUERY = """
import sys
from dagster_project.lib.bounded_sql import connect_readonly
con = connect_readonly(sys.argv[1], sys.argv[2])
print(con.execute("select count(*) from logs.raw_logs").fetchone()[0], flush=True)
sys.stdin.readline()
"""


def _day(base, day: str, k: int) -> dict:
    return {partition_path(base, "logs", "raw_logs", day): pl.DataFrame({"day": [day] * k, "k": [k] * k})}


def test_a_partition_is_not_replaced_while_a_query_holds_the_warehouse(tmp_path):
    base, db = tmp_path / "assets", tmp_path / "assets" / "warehouse.duckdb"
    folder = partition_dir(base, "logs", "raw_logs")
    store_partitions(db, "logs.raw_logs", folder, _day(base, "d1", 3), "setup")
    target = partition_path(base, "logs", "raw_logs", "d1")

    # another process runs a query, as `clarify sql` does: it holds the read lock until told to stop
    reader = subprocess.Popen([sys.executable, "-c", HOLD_QUERY, str(db), str(base)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline().strip() == "3"
        writer = threading.Thread(target=store_partitions,
                                  args=(db, "logs.raw_logs", folder, _day(base, "d1", 7), "w"))
        writer.start()
        time.sleep(1.0)
        assert pl.read_parquet(target)["k"].to_list() == [3] * 3  # staged, not renamed while the query runs
    finally:
        reader.communicate("done\n", timeout=60)
    writer.join(timeout=60)
    assert not writer.is_alive()
    assert pl.read_parquet(target)["k"].to_list() == [7] * 7
    assert sorted(p.name for p in folder.iterdir()) == ["d1.parquet"]  # no temp file left


def test_staged_files_are_removed_when_the_lock_cannot_be_had(tmp_path, monkeypatch):
    base, db = tmp_path / "assets", tmp_path / "assets" / "warehouse.duckdb"
    folder = partition_dir(base, "logs", "raw_logs")
    store_partitions(db, "logs.raw_logs", folder, _day(base, "d1", 3), "setup")

    def locked(_db):
        raise duckdb.IOException("Could not set lock on file: Conflicting lock is held")

    monkeypatch.setattr(warehouse, "_open_writable_waiting", locked)
    with pytest.raises(duckdb.IOException, match="Conflicting lock"):
        store_partitions(db, "logs.raw_logs", folder, {**_day(base, "d1", 7), **_day(base, "d2", 5)}, "w")
    assert sorted(p.name for p in folder.iterdir()) == ["d1.parquet"]  # d1 as it was, no d2, no temp file
    assert pl.read_parquet(partition_path(base, "logs", "raw_logs", "d1"))["k"].to_list() == [3] * 3


def test_a_bad_partition_leaves_the_others_unpublished(tmp_path):
    base, db = tmp_path / "assets", tmp_path / "assets" / "warehouse.duckdb"
    folder = partition_dir(base, "logs", "raw_logs")
    store_partitions(db, "logs.raw_logs", folder, _day(base, "d1", 3), "setup")
    bad = {partition_path(base, "logs", "raw_logs", "d2"): tmp_path / "missing.parquet"}
    with pytest.raises(FileNotFoundError):
        store_partitions(db, "logs.raw_logs", folder, {**_day(base, "d1", 7), **bad}, "w")
    assert sorted(p.name for p in folder.iterdir()) == ["d1.parquet"]
    assert pl.read_parquet(partition_path(base, "logs", "raw_logs", "d1"))["k"].to_list() == [3] * 3
