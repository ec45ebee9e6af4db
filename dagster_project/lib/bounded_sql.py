"""`clarify sql`'s entry point: the warehouse opened read-only and sandboxed, exactly one SELECT per query, and the
query under bounds (params' `sql:` section, overridden by the command line: sql_bounds): a time limit (a timer
interrupts it), DuckDB's memory_limit and threads. A bound that is hit is a SqlBoundError whose message names the
setting."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import duckdb
import polars as pl
from pydantic import ValidationError
from tenacity import (
    retry,
    retry_if_exception,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_random_exponential,
)

from dagster_project.config import ParamsError, parse_params, read_params_file
from dagster_project.config.sql import SqlConfig
from dagster_project.lib.warehouse import ASSETS_DIR, WAREHOUSE


# the `clarify sql` option that overrides each key of params' `sql:` section
SQL_OPTIONS = {"timeout_s": "--timeout", "memory_limit": "--memory-limit", "threads": "--threads"}


def sql_bounds(params: str, **override: object) -> SqlConfig:
    """params' `sql:` section (its defaults when the file does not exist; other sections are not checked here)
    with the options given on the command line on top; ParamsError naming the key or option."""
    path = Path(params)
    data = (read_params_file(path) or {}) if path.exists() else {}
    bounds = parse_params({"sql": data.get("sql") or {}}, params).sql
    given = {k: v for k, v in override.items() if v is not None}
    try:
        return SqlConfig.model_validate(bounds.model_dump() | given)
    except ValidationError as err:
        raise ParamsError("; ".join(f"{SQL_OPTIONS[e['loc'][0]]}: {e['msg']} (got {e['input']!r})"
                                    for e in err.errors())) from None


# a writer holds the file for the milliseconds of a view update: a reader waits for it rather than failing
@retry(retry=retry_if_exception_type(duckdb.IOException), stop=stop_after_delay(30),
       wait=wait_random_exponential(multiplier=0.05, max=1), reraise=True)
def _open_readonly(db_path: str | Path) -> duckdb.DuckDBPyConnection:
    return duckdb.connect(str(db_path), read_only=True,
                          config={"autoinstall_known_extensions": False, "autoload_known_extensions": False,
                                  "allow_community_extensions": False})


def connect_readonly(db_path: str | Path = WAREHOUSE, assets_dir: str | Path = ASSETS_DIR,
                     memory_limit: str | None = None, threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """The warehouse opened read-only and sandboxed: files are reachable only below ``assets_dir`` (the views'
    Parquet), no extension is installed or loaded, nothing spills to disk (a query past ``memory_limit`` fails),
    and the configuration is locked so a query cannot undo it. ``threads``: DuckDB's worker threads."""
    if not Path(db_path).exists():
        raise FileNotFoundError(f"{db_path} does not exist yet: run `make demo` or materialize some assets first")
    con = _open_readonly(db_path)
    try:
        if memory_limit is not None:
            con.execute("SET memory_limit = ?", [memory_limit])
        if threads is not None:
            con.execute("SET threads = ?", [threads])
        con.execute("SET temp_directory = ''")
        con.execute("SET enable_progress_bar = false")  # a long query must not draw DuckDB's bar into the output
        # allowed_directories can only be set once the database runs, and must be set before external access is off
        con.execute("SET allowed_directories = ?", [[str(Path(assets_dir).resolve()) + os.sep]])
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
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


# a Parquet file replaced while DuckDB reads it can read as corrupt, its metadata taken from one version and its pages
# from the other; the project's writers rename only under the warehouse's write lock (lib/warehouse.publish), which
# this query's read-only connection excludes, but another tool (`dvc checkout`) may not: the query runs again
REWRITTEN_MIDREAD = ("TProtocolException", "No magic bytes found", "too small to be a Parquet file")


def _rewritten_midread(err: BaseException) -> bool:
    return isinstance(err, duckdb.Error) and any(s in str(err) for s in REWRITTEN_MIDREAD)


@retry(retry=retry_if_exception(_rewritten_midread), stop=stop_after_attempt(5),
       wait=wait_random_exponential(multiplier=0.05, max=0.5), reraise=True)
def _fetch(con: duckdb.DuckDBPyConnection, sql: str) -> pl.DataFrame:
    return con.sql(sql).pl()


class SqlBoundError(RuntimeError):
    """The query ran past a bound of `sql:` (time or memory) and was stopped."""


def run_query(query: str, db: str | Path, bounds: SqlConfig) -> pl.DataFrame:
    """The result of one read-only query (query_only decides what counts as one), stopped after
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
            return _fetch(con, sql)
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
