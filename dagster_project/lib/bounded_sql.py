"""One `clarify sql` query under bounds: a time limit (a timer interrupts the query), DuckDB's memory_limit and
threads on the read-only connection. A bound that is hit is a SqlBoundError whose message names the setting."""

from __future__ import annotations

import threading
from pathlib import Path

import duckdb
import polars as pl

from dagster_project.config.sql import SqlConfig
from dagster_project.lib.warehouse import connect_readonly, query_only


class SqlBoundError(RuntimeError):
    """The query ran past a bound of `sql:` (time or memory) and was stopped."""


def run_query(query: str, db: str | Path, bounds: SqlConfig) -> pl.DataFrame:
    """The result of one read-only query (warehouse.query_only decides what counts as one), stopped after
    ``bounds.timeout_s`` seconds or when it needs more than ``bounds.memory_limit``."""
    sql = query_only(query)
    with connect_readonly(db, memory_limit=bounds.memory_limit, threads=bounds.threads) as con:
        fired = threading.Event()

        def stop() -> None:
            fired.set()
            con.interrupt()

        timer = threading.Timer(bounds.timeout_s, stop)
        timer.daemon = True
        timer.start()
        try:
            return con.sql(sql).pl()
        except duckdb.InterruptException:
            if not fired.is_set():
                raise
            raise SqlBoundError(f"the query ran longer than {bounds.timeout_s:g} s and was stopped "
                                "(raise --timeout, or sql.timeout_s in params.yaml)") from None
        except duckdb.OutOfMemoryException as err:
            reason = str(err).splitlines()[0]
            raise SqlBoundError(f"the query needs more memory than memory_limit {bounds.memory_limit} and was stopped "
                                f"(raise --memory-limit, or sql.memory_limit in params.yaml): {reason}") from None
        finally:
            timer.cancel()
