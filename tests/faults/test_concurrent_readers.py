"""Two writers and a reader at once (issue 29 item 1): the writers rewrite the partitions of one table and its view
in a loop, as two runs of a group started a second apart do; the reader queries the view the way `clarify sql`
does, and never fails nor sees a partition that is half old, half new."""

from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path

import polars as pl

from dagster_project.config.sql import SqlConfig
from dagster_project.lib.bounded_sql import run_query
from dagster_project.lib.io_manager import store_partitions
from dagster_project.lib.warehouse import partition_dir, partition_path

# the issue asks for 30 s; `make test` reads for at least 5 s and until the writers have rewritten every partition
# four times (on a busy machine a reader holding the warehouse's lock slows them down); 30 s figures: docs/reliability.md
DURATION_S = 5.0
MAX_S = 120.0
DAYS = ("2024-05-01", "2024-05-02", "2024-05-03")
MIN_WRITES = 4 * len(DAYS)
QUERY = "select day, count(*) as n, min(k) as lo, max(k) as hi from logs.raw_logs group by day"


def write_loop(base: str, db: str, seed: int, ready, go, stop, writes) -> None:
    """From ``go`` to ``stop``: rewrite every day's partition (k rows, each holding k, so a partition is
    consistent when count = k) and its view, as the IO manager does; counts the partitions written into ``writes``."""
    folder = partition_dir(base, "logs", "raw_logs")
    k = seed
    ready.release()
    go.wait()
    while not stop.is_set():
        for day in DAYS:
            k = k % 5_000 + 1_001
            rows = pl.DataFrame({"day": [day] * k, "k": [k] * k})
            path = partition_path(base, "logs", "raw_logs", day)
            store_partitions(db, "logs.raw_logs", folder, {path: rows}, "writer")
            with writes.get_lock():
                writes.value += 1


def read_loop(db: str, writes) -> tuple[int, list[str]]:
    """(queries answered, errors: an exception or a partition whose rows are not all of one write), reading for
    DURATION_S and until the writers wrote MIN_WRITES partitions (MAX_S at most)."""
    reads, errors = 0, []
    start = time.monotonic()
    while (time.monotonic() - start < DURATION_S or writes.value < MIN_WRITES) and time.monotonic() - start < MAX_S:
        try:
            rows = run_query(QUERY, db, SqlConfig()).rows()
        except Exception as err:  # noqa: BLE001 - every failure counts
            errors.append(f"{type(err).__name__}: {err}")
            continue
        reads += 1
        errors += [f"partition {day}: {n} rows holding {lo}..{hi}" for day, n, lo, hi in rows if not n == lo == hi]
    return reads, errors


def test_a_reader_never_fails_while_two_writers_rewrite_the_table(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    base, db = "assets", str(Path("assets/warehouse.duckdb"))
    setup = {partition_path(base, "logs", "raw_logs", day): pl.DataFrame({"day": [day] * 3, "k": [3] * 3})
             for day in DAYS}
    store_partitions(db, "logs.raw_logs", partition_dir(base, "logs", "raw_logs"), setup, "setup")
    ctx = mp.get_context("spawn")
    ready, go, stop, writes = ctx.Semaphore(0), ctx.Event(), ctx.Event(), ctx.Value("i", 0)
    writers = [ctx.Process(target=write_loop, args=(base, db, seed, ready, go, stop, writes)) for seed in (0, 2_500)]
    for w in writers:
        w.start()
    try:
        assert all(ready.acquire(timeout=120) for _ in writers), "a writer did not start"
        go.set()
        reads, errors = read_loop(db, writes)
    finally:
        go.set()
        stop.set()
        for w in writers:
            w.join(timeout=120)
    assert [w.exitcode for w in writers] == [0, 0]
    assert errors == []
    assert reads > 0 and writes.value >= MIN_WRITES
    assert sorted(p.name for p in Path(base, "logs", "raw_logs").iterdir()) == [f"{d}.parquet" for d in DAYS]
