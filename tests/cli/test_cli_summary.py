"""`clarify summary` and `clarify sql --csv`: read-only views over the warehouse, from the project root."""

from pathlib import Path

import polars as pl
from typer.testing import CliRunner

from dagster_project.cli import app
from dagster_project.lib.warehouse import rebuild_views, write_parquet_atomic


def test_summary_all_counts_every_view_then_prints_the_accuracy_table(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_parquet_atomic(pl.DataFrame({"x": [1, 2, 3]}), Path("assets/benchmark/taxonomy.parquet"))
    for day, n in (("2024-05-01", 2), ("2024-05-02", 4)):  # a partitioned asset: one view over both files
        write_parquet_atomic(pl.DataFrame({"t": list(range(n))}), Path(f"assets/logs/raw_logs/{day}.parquet"))
    write_parquet_atomic(pl.DataFrame({
        "subject": ["m", "m"], "method": ["base", "base"], "persona": [None, "precise"],
        "breakdown": ["overall", "by_persona"], "n": [10, 4], "accuracy": [0.5, 0.25],
        "under_clarification": [0.3, 0.5], "over_clarification": [0.1, 0.0], "invalid": [0.1, 0.25],
    }), Path("assets/evaluation/metric_tables.parquet"))
    rebuild_views()
    result = CliRunner().invoke(app, ["summary", "--all"], terminal_width=200)
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip()
            for line in result.output.splitlines() if line.count("│") == 3}
    assert rows == {"benchmark.taxonomy": "3", "evaluation.metric_tables": "2", "logs.raw_logs": "6"}
    assert "accuracy (% of evaluated turns)" in result.output and "25.0" in result.output


def test_sql_csv_writes_nested_columns_as_json(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_parquet_atomic(pl.DataFrame({"id": [1, 2], "slots": [["a", "b"], None], "s": [{"k": 1}, {"k": 2}]}),
                         Path("assets/evaluation/predictions.parquet"))
    rebuild_views()
    result = CliRunner().invoke(app, ["sql", "--csv", "select * from evaluation.predictions order by id"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == ["id,slots,s", '1,"[""a"", ""b""]","{""k"": 1}"', "2,,\"{\"\"k\"\": 2}\""]
