"""`clarify sql` runs a query again when a Parquet file it reads was replaced mid-read (it reads as corrupt), and
only then: other errors, and a file that stays corrupt, still fail."""

import duckdb
import pytest

from dagster_project.lib import bounded_sql
from dagster_project.lib.bounded_sql import _fetch


class FlakyConnection:
    """A connection whose first `fails` queries raise `error`, then answer."""

    def __init__(self, fails: int, error: Exception):
        self.fails, self.error, self.calls = fails, error, 0

    def sql(self, query: str):
        self.calls += 1
        if self.calls <= self.fails:
            raise self.error
        return duckdb.sql(query)


MIDREAD = duckdb.InvalidInputException("Invalid Input Error: Error reading file 'a.parquet': TProtocolException: "
                                       "Invalid data")


@pytest.fixture(autouse=True)
def no_wait(monkeypatch):
    monkeypatch.setattr(_fetch.retry, "sleep", lambda s: None)


def test_a_file_rewritten_mid_read_is_read_again():
    con = FlakyConnection(2, MIDREAD)
    assert _fetch(con, "select 42 as x").to_dicts() == [{"x": 42}] and con.calls == 3


def test_a_file_that_stays_corrupt_fails_after_five_reads():
    con = FlakyConnection(99, MIDREAD)
    with pytest.raises(duckdb.InvalidInputException, match="TProtocolException"):
        _fetch(con, "select 1")
    assert con.calls == 5


def test_other_errors_are_not_retried():
    con = FlakyConnection(1, duckdb.CatalogException("Catalog Error: Table with name nosuch does not exist!"))
    with pytest.raises(duckdb.CatalogException):
        _fetch(con, "select 1")
    assert con.calls == 1


def test_a_truncated_parquet_file_reads_as_rewritten(tmp_path):
    """What DuckDB says of a file cut short is one of the messages the retry knows."""
    good = tmp_path / "good.parquet"
    duckdb.sql(f"copy (select range as k from range(1000)) to '{good}' (format parquet)")
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(good.read_bytes()[:12])
    with pytest.raises(duckdb.Error) as err:
        duckdb.sql(f"select count(*) from read_parquet('{cut}')").fetchall()
    assert bounded_sql._rewritten_midread(err.value)
