"""GX checks on tables bigger than one chunk (defs/quality/checks.py): the same verdicts and counts as one
whole-frame validation, read from Parquet partitions where they lie, and GX never sees more than CHUNK_ROWS rows."""

from __future__ import annotations

from datetime import date

import polars as pl
import pytest

from dagster_project.config import parse_params
from dagster_project.defs.quality import checks
from dagster_project.defs.quality.checks import Expectation, Suite, validate_frame
from dagster_project.lib.warehouse import partition_files, read_asset, write_parquet_atomic

PARAMS = parse_params({"quality": {"max_error_rate": 0.01}})
N = 5_000  # rows: three chunks of 2,048 when CHUNK_ROWS is 2,048


def table(bad: bool) -> pl.DataFrame:
    """Ids unique (or, when bad, one id repeated across chunk boundaries); a null key part; statuses; dates."""
    ids = [f"id{i:05d}" for i in range(N)]
    if bad:
        ids[4_500] = ids[10]  # the copy lies two chunks after the original
        ids[2_100] = ids[2_000]
    return pl.DataFrame({
        "id": ids,
        "conv": [f"c{i // 5}" for i in range(N)],
        "turn": [None if i == 7 else i % 5 for i in range(N)],
        "status": ["llm_error" if bad and i in (3, 2_049, 4_999) else "ok" for i in range(N)],
        "a": list(range(N)), "b": [i + (1 if bad and i == 3_000 else 0) for i in range(N)],
        "score": [None if i % 97 == 0 else float(i % 6) for i in range(N)],
        "day": [date(2024, 5, 1 + i % 3) for i in range(N)],
    })


def suite() -> Suite:
    e = Expectation
    return Suite("g", "t", True, "", [
        e("expect_column_values_to_be_unique", {"column": "id"}),
        e("expect_compound_columns_to_be_unique", {"column_list": ["conv", "turn"]}),
        e("expect_column_values_to_be_in_set", {"column": "status", "value_set": ["ok"]}),
        e("expect_column_values_to_be_in_set", {"column": "status", "value_set": ["ok"], "mostly": 0.999}),
        e("expect_column_values_to_not_be_null", {"column": "score"}),
        e("expect_column_values_to_be_between", {"column": "score", "min_value": 0, "max_value": 4}),
        e("expect_column_pair_values_to_be_equal", {"column_A": "a", "column_B": "b"}),
        e("expect_column_max_to_be_between", {"column": "a", "max_value": 4_000}),
        e("expect_column_min_to_be_between", {"column": "score", "min_value": 0}),
        e("expect_table_row_count_to_be_between", {"min_value": 1, "max_value": N}),
        e("expect_table_columns_to_match_ordered_list", {"column_list": ["id", "conv"]}),
        e("expect_column_values_to_not_be_null", {"column": "missing_column"}),
        e("expect_column_values_to_be_in_set", {"column": "ok", "value_set": [True]},
          query="select status = 'ok' as ok from t"),
        e("expect_column_max_to_be_between", {"column": "error_rate", "max_value": "${quality.max_error_rate}"},
          query="select avg(case when status = 'llm_error' then 1.0 else 0.0 end) as error_rate from t"),
        e("expect_column_values_to_be_unique", {"column": "day"}, query="select distinct day from t"),
    ])


def comparable(results: dict) -> dict:
    keys = ("success", "element_count", "unexpected_count", "observed_value")
    return {label: {k: r[k] for k in keys if k in r} for label, r in results.items()}


@pytest.mark.parametrize("bad", [False, True])
def test_chunked_validation_agrees_with_one_whole_frame(monkeypatch, bad):
    df = table(bad)
    whole_ok, whole = validate_frame(df, suite(), PARAMS)  # 5,000 rows fit the default chunk: one GX batch
    monkeypatch.setattr(checks, "CHUNK_ROWS", 2_048)
    ok, chunked = validate_frame(df, suite(), PARAMS)
    assert comparable(chunked) == comparable(whole)
    assert ok == whole_ok is False  # the missing column fails either way
    failed = {label for label, r in chunked.items() if not r["success"]}
    expected = {"04 expect_column_values_to_not_be_null", "05 expect_column_values_to_be_between",
                "07 expect_column_max_to_be_between", "10 expect_table_columns_to_match_ordered_list",
                "11 expect_column_values_to_not_be_null"}
    if bad:
        expected |= {"00 expect_column_values_to_be_unique", "02 expect_column_values_to_be_in_set",
                     "06 expect_column_pair_values_to_be_equal", "12 expect_column_values_to_be_in_set"}
    assert failed == expected
    if bad:  # counted over every chunk, and the duplicates two chunks apart are found
        assert chunked["00 expect_column_values_to_be_unique"]["unexpected_count"] == 4
        assert sorted(chunked["00 expect_column_values_to_be_unique"]["partial_unexpected_list"]) == [
            "id00010", "id00010", "id02000", "id02000"]
        assert chunked["02 expect_column_values_to_be_in_set"]["unexpected_count"] == 3
        assert chunked["03 expect_column_values_to_be_in_set"]["success"]  # 3 of 5,000 within mostly=0.999
        assert chunked["13 expect_column_max_to_be_between"]["observed_value"] == pytest.approx(3 / N)


def test_partitions_are_read_where_they_lie_and_gx_gets_one_chunk_at_a_time(tmp_path, monkeypatch):
    df = table(bad=True)
    for i in range(3):
        path = tmp_path / "g" / "t" / f"method=m{i % 2}" / f"part={i}" / "data.parquet"
        write_parquet_atomic(df.slice(i * 1_700, 1_700), path)
    files = partition_files(tmp_path, "g", "t")
    assert len(files) == 3
    frame = read_asset(tmp_path, "g", "t")  # every partition in memory, hive columns added: the old way
    monkeypatch.setattr(checks, "CHUNK_ROWS", 2_048)
    seen: list[int] = []
    validate = checks._Run.validate
    # rows of data GX is handed (a row count gets a frame of no columns: an index, no data)
    monkeypatch.setattr(checks._Run, "validate",
                        lambda self, f, idx: seen.append(len(f) if len(f.columns) else 0) or validate(self, f, idx))
    hive = Expectation("expect_column_values_to_be_in_set", {"column": "method", "value_set": ["m0"]})
    suite_ = Suite("g", "t", True, "", [*suite().expectations, hive])
    _, from_files = validate_frame(files, suite_, PARAMS)
    assert max(seen) <= 2_048 and sum(seen) > N
    _, from_frame = validate_frame(frame, suite_, PARAMS)
    assert comparable(from_files) == comparable(from_frame)
    assert from_files["15 expect_column_values_to_be_in_set"]["unexpected_count"] == 1_700  # the m1 partition
