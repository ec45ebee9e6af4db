"""`clarify sql` is bounded (issue 29 item 4): a time limit that interrupts the query, DuckDB memory_limit and
threads from params' `sql:` section or the command line, a clear message and exit 3 when a bound is hit; the
connection stays read-only for data and files (nothing spills to disk)."""

from pathlib import Path

import duckdb
import polars as pl
import pytest
import yaml
from typer.testing import CliRunner

from dagster_project.cli import app
from dagster_project.config import Params
from dagster_project.lib.bounded_sql import connect_readonly
from dagster_project.lib.warehouse import rebuild_views, write_parquet_atomic

FOREVER = "select count(*) from range(1000000000) a cross join range(1000000000) b"  # 10^18 rows
HUNGRY = "select count(*) from (select distinct range from range(20000000))"  # a hash table of 20 M keys
TAXONOMY = Path("assets/benchmark/taxonomy.parquet")


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    write_parquet_atomic(pl.DataFrame({"label": ["lexical", "semantic"]}), TAXONOMY)
    rebuild_views()
    return tmp_path


def sql(*args: str):
    return CliRunner().invoke(app, ["sql", "--csv", *args], terminal_width=400)


def files_under(folder: str) -> list[str]:
    return sorted(str(p) for p in Path(folder).rglob("*"))


def test_a_query_that_would_run_forever_is_stopped_at_the_timeout(project):
    result = sql("--timeout", "1", FOREVER)
    assert result.exit_code == 3, result.output
    assert "the query ran longer than 1 s and was stopped (raise --timeout, or sql.timeout_s" in result.output
    assert "Traceback" not in result.output
    assert sql("select count(*) as n from benchmark.taxonomy").output.split() == ["n", "2"]


def test_the_timeout_comes_from_params(project):
    Path("params.yaml").write_text(yaml.safe_dump({"sql": {"timeout_s": 0.5}}))
    result = sql(FOREVER)
    assert result.exit_code == 3, result.output
    assert "ran longer than 0.5 s" in result.output


def test_a_query_past_the_memory_limit_stops_with_a_message_and_spills_nothing(project):
    before = files_under("assets")
    result = sql("--memory-limit", "20MB", HUNGRY)
    assert result.exit_code == 3, result.output
    assert "the query needs more memory than memory_limit 20MB and was stopped (raise --memory-limit" in result.output
    assert "Out of Memory Error" in result.output and "Traceback" not in result.output
    assert files_under("assets") == before and not Path("assets/warehouse.duckdb.tmp").exists()
    assert sql("--memory-limit", "1GB", HUNGRY).output.split() == ["count_star()", "20000000"]


def test_bounds_are_set_on_the_connection_and_cannot_be_raised_by_a_query(project):
    Path("params.yaml").write_text(yaml.safe_dump({"sql": {"memory_limit": "512MiB", "threads": 1}}))
    result = sql("select current_setting('threads') as t, current_setting('memory_limit') as m, "
                 "current_setting('temp_directory') as d")
    assert result.output.splitlines()[1:] == ['1,512.0 MiB,""']  # no temp_directory: nothing spills
    result = sql("--threads", "2", "--memory-limit", "1GiB", "select current_setting('threads') as t, "
                 "current_setting('memory_limit') as m")
    assert result.output.splitlines()[1:] == ["2,1.0 GiB"]
    before = files_under(".")
    for statement in ("SET memory_limit = '100GB'", "SET threads = 64", "SET temp_directory = 'assets/spill'",
                      "RESET memory_limit", "EXPORT DATABASE 'assets/export'", "CHECKPOINT", "VACUUM",
                      "COPY benchmark.taxonomy TO 'assets/benchmark/copy.csv'", "ATTACH 'assets/x.duckdb' AS x",
                      "INSTALL httpfs", "LOAD httpfs"):
        result = sql(statement)
        assert result.exit_code == 1 and "error: only queries" in result.output, (statement, result.output)
    assert files_under(".") == before


@pytest.mark.parametrize(("where", "value", "named"), [
    ("params", {"threads": 0}, "sql.threads: Input should be greater than or equal to 1"),
    ("params", {"memory_limit": "lots"}, "sql.memory_limit: String should match pattern"),
    ("params", {"timeout_s": "[/bold]"}, "sql.timeout_s: Input should be a valid number"),
    ("params", {"spill": True}, "sql.spill: unknown key"),
    ("cli", ["--threads", "0"], "--threads: Input should be greater than or equal to 1 (got 0)"),
    ("cli", ["--memory-limit", "[red]lots"], "--memory-limit: String should match pattern"),
    ("cli", ["--timeout", "-1"], "--timeout: Input should be greater than 0 (got -1.0)"),
])
def test_a_bad_bound_is_refused_naming_the_key_or_option(project, where, value, named):
    if where == "params":
        Path("params.yaml").write_text(yaml.safe_dump({"sql": value}))
        result = sql("select 1")
    else:
        result = sql(*value, "select 1")
    assert result.exit_code == 2, result.output
    assert named in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_the_shipped_params_hold_the_documented_defaults():
    shipped = yaml.safe_load((Path(__file__).resolve().parents[2] / "params.yaml").read_text())["sql"]
    assert shipped == Params().sql.model_dump() == {"timeout_s": 60, "memory_limit": "2GB", "threads": 2}


def test_the_bounded_connection_is_read_only_without_the_statement_check(project):
    """Defence in depth: the connection itself (not only `clarify sql`'s one-SELECT check) refuses to change the
    warehouse, to attach a database it could write, to raise its bounds or to spill."""
    before = files_under(".")
    with connect_readonly(memory_limit="64MB", threads=1) as con:
        for statement in ("CREATE TABLE benchmark.t AS SELECT 1", "DROP VIEW benchmark.taxonomy",
                          "ATTACH 'assets/new.duckdb' AS w", "SET memory_limit = '100GB'",
                          "SET temp_directory = 'assets/spill'"):
            with pytest.raises(duckdb.Error):
                con.execute(statement)
        with pytest.raises(duckdb.OutOfMemoryException):
            con.execute(HUNGRY)
    assert files_under(".") == before
