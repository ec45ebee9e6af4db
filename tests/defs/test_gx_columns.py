"""GX validates a pandas copy of only the columns a suite's expectations name (wide frames stay cheap)."""

import polars as pl

from dagster_project.config import Params
from dagster_project.defs.quality.checks import Expectation, Suite, checked_columns, validate_frame

WIDE = pl.DataFrame({"id": [1, 2, 3], "status": ["ok", "ok", "llm_error"], "trace": ["x" * 1000] * 3,
                     "a": [1, 1, 2], "b": [1, 1, 2]})


def test_only_the_named_columns_are_copied():
    exps = [Expectation("expect_column_values_to_be_unique", {"column": "id"}),
            Expectation("expect_column_pair_values_to_be_equal", {"column_A": "a", "column_B": "b"}),
            Expectation("expect_compound_columns_to_be_unique", {"column_list": ["id", "status"]})]
    assert checked_columns(WIDE.columns, exps) == ["id", "status", "a", "b"]
    # a row count needs rows, not columns (one column keeps them); a table-columns expectation needs them all
    assert checked_columns(WIDE.columns, [Expectation("expect_table_row_count_to_equal", {"value": 3})]) == ["id"]
    cols = Expectation("expect_table_columns_to_match_ordered_list", {"column_list": ["id"]})
    assert checked_columns(WIDE.columns, [cols]) == WIDE.columns


def test_results_match_the_whole_frame_and_a_missing_column_still_fails():
    suite = Suite("g", "a", True, "", [
        Expectation("expect_column_values_to_be_in_set", {"column": "status", "value_set": ["ok"]}),
        Expectation("expect_table_row_count_to_equal", {"value": 3}),
        Expectation("expect_column_values_to_not_be_null", {"column": "nope"})])
    ok, results = validate_frame(WIDE, suite, Params())
    assert not ok
    assert [v["success"] for v in results.values()] == [False, True, False]
    assert results["00 expect_column_values_to_be_in_set"]["unexpected_count"] == 1
