"""`clarify sql` is read-only for files too: one SELECT-type statement, files reachable only below assets/,
no extension install or load, configuration locked (issue 16 item 1)."""

from pathlib import Path

import duckdb
import polars as pl
import pytest
from typer.testing import CliRunner

from dagster_project.cli import app
from dagster_project.lib.bounded_sql import connect_readonly, query_only
from dagster_project.lib.warehouse import partition_path, rebuild_views, write_parquet_atomic

TAXONOMY = Path("assets/benchmark/taxonomy.parquet")


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A project folder with one plain and one partitioned asset and their views."""
    monkeypatch.chdir(tmp_path)
    write_parquet_atomic(pl.DataFrame({"label": ["lexical", "semantic"]}), TAXONOMY)
    for day in ("2024-05-01", "2024-05-02"):
        write_parquet_atomic(pl.DataFrame({"t": [1, 2]}), partition_path("assets", "logs", "raw_logs", day))
    rebuild_views()
    return tmp_path


def sql(query: str):
    return CliRunner().invoke(app, ["sql", "--csv", query])


def taxonomy_labels() -> list[str]:
    return sql("select label from benchmark.taxonomy order by label").output.split()[1:]


@pytest.mark.parametrize("query", [
    "COPY (select 'attacker' as label) TO 'assets/benchmark/taxonomy.parquet' (FORMAT parquet)",
    "COPY benchmark.taxonomy TO 'OUTSIDE/x.csv'",
    "select * from read_csv('/etc/passwd')",
    "select * from glob('/root/**')",
    "INSTALL httpfs",
    "LOAD httpfs",
    "ATTACH 'other.duckdb' AS other",
    "DROP VIEW benchmark.taxonomy",
    "CREATE TABLE benchmark.scratch AS select 1",
    "SET enable_external_access = true",
    "select 1; COPY (select 1) TO 'assets/benchmark/taxonomy.parquet'",
])
def test_sql_refuses_every_write_and_every_file_outside_assets(project, query):
    query = query.replace("OUTSIDE", str(project.parent))
    before = TAXONOMY.read_bytes()
    result = sql(query)
    assert result.exit_code == 1, result.output
    assert "error" in result.output
    assert "root:" not in result.output  # nothing of /etc/passwd
    assert TAXONOMY.read_bytes() == before
    assert not (project.parent / "x.csv").exists() and not (project / "other.duckdb").exists()
    assert taxonomy_labels() == ["lexical", "semantic"]


def test_sandbox_holds_without_the_statement_check(project):
    """Defence in depth: the connection's own settings refuse files outside assets/ and cannot be unlocked."""
    with connect_readonly() as con:
        for query in ("select * from read_csv('/etc/passwd')", "select * from glob('/root/**')",
                      "select * from read_csv('assets/../../../etc/passwd')", f"COPY (select 1) TO '{project.parent}/y.csv'",
                      "INSTALL httpfs"):
            with pytest.raises(duckdb.Error, match="disabled by configuration"):
                con.execute(query)
        with pytest.raises(duckdb.Error, match="locked"):
            con.execute("SET enable_external_access = true")
        assert con.execute("select count(*) from read_parquet('assets/benchmark/taxonomy.parquet')").fetchone() == (2,)
    assert not (project.parent / "y.csv").exists()


@pytest.mark.parametrize("query", ["select * from benchmark.taxonomy", "from logs.raw_logs",
                                   "with x as (select * from logs.raw_logs) select count(*) from x",
                                   "describe benchmark.taxonomy", "show all tables",
                                   "summarize logs.raw_logs", "select * from duckdb_views()"])
def test_queries_pass_the_statement_check(query):
    assert query_only(query) == query


@pytest.mark.parametrize("query", ["explain analyze copy (select 1) to 'assets/x.csv'", "pragma version",
                                   "call pragma_version()", "select 1; select 2", ""])
def test_other_statements_fail_the_statement_check(query):
    with pytest.raises(ValueError):
        query_only(query)


def test_select_works_over_every_view_of_the_project(tmp_path, monkeypatch):
    """Every asset of the project (plain file or partition folder) gets a view that `clarify sql` can read."""
    import dagster as dg

    from dagster_project.definitions import defs

    monkeypatch.chdir(tmp_path)
    graph = defs.resolve_asset_graph()
    views = []
    for key in graph.get_all_asset_keys():
        group, name = key.path
        if graph.get(key).partitions_def is not None:
            path = partition_path("assets", group, name, "p1")
        else:
            path = Path("assets") / group / f"{name}.parquet"
        write_parquet_atomic(pl.DataFrame({"k": [1, 2]}), path)
        views.append(f"{group}.{name}")
    assert len(views) > 40 and isinstance(defs, dg.Definitions)
    assert sorted(rebuild_views()) == sorted(views)
    for view in views:
        result = sql(f"select sum(k) as s from {view}")
        assert result.exit_code == 0, (view, result.output)
        assert result.output.split() == ["s", "3"], view
