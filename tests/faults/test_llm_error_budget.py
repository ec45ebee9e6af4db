"""Error budgets per partition and per role (defs/quality/checks.py): a dead endpoint for one method or one
role fails the asset's check even when the whole table's error share is under quality.max_error_rate."""

import dagster as dg
import polars as pl
import yaml

from dagster_project.config import parse_params
from dagster_project.defs.quality.checks import (
    build_checks,
    error_budget,
    partition_error_counts,
)
from dagster_project.io.writers import write_parquet_atomic
from dagster_project.lib.io_manager import WarehouseIOManager
from dagster_project.lib.warehouse import partition_path

METHODS = [f"m{i}" for i in range(9)]


def _write_partitions(base, dead: str | None) -> None:
    """9 methods x 16 rows (144); every row of `dead` is llm_error (16/144 = 11% of the table)."""
    for m in METHODS:
        status = ["llm_error" if m == dead else "ok"] * 16
        key = dg.MultiPartitionKey({"subject": "s1", "method": m})
        write_parquet_atomic(pl.DataFrame({"status": status}), partition_path(base, "evaluation", "predictions", key))


def test_one_dead_method_fails_its_partition_although_the_table_average_passes(tmp_path):
    _write_partitions(tmp_path, dead="m3")
    counts = partition_error_counts(tmp_path, "evaluation", "predictions")
    assert len(counts) == 9 and sum(e for e, _ in counts.values()) / sum(n for _, n in counts.values()) < 0.2
    result = error_budget(counts, 0.2)
    assert not result["success"]
    assert result["over_budget"] == {"method=m3/subject=s1": {"errors": 16, "of": 16, "rate": 1.0}}
    _write_partitions(tmp_path, dead=None)
    assert error_budget(partition_error_counts(tmp_path, "evaluation", "predictions"), 0.2)["success"]


def test_check_fails_on_a_partition_over_budget_and_on_a_role_over_budget(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "toy.scores.yaml").write_text(yaml.safe_dump({
        "asset": "toy/scores", "blocking": False, "expectations": [
            {"name": "whole-table error rate", "type": "expect_column_max_to_be_between",
             "query": "select avg(case when status = 'llm_error' then 1.0 else 0.0 end) as r from t",
             "kwargs": {"column": "r", "max_value": "${quality.max_error_rate}"}}]}))
    plan = {  # partition -> (row statuses, judge errors of 10 requests)
        "a": (["ok"] * 10, 0), "b": (["ok"] * 10, 0), "c": (["ok"] * 10, 0), "d": (["ok"] * 10, 0),
    }

    @dg.asset(key=["toy", "scores"], partitions_def=dg.StaticPartitionsDefinition(list(plan)))
    def scores(context: dg.AssetExecutionContext) -> dg.Output:
        statuses, judge_errors = plan[context.partition_key]
        return dg.Output(pl.DataFrame({"status": statuses}), metadata={
            "llm/judge/requests": 10, "llm/judge/errors": judge_errors,
            "llm/subject:s1/requests": 10, "llm/subject:s1/errors": 0, "llm/requests": 20, "llm/errors": judge_errors})

    params = parse_params({"quality": {"max_error_rate": 0.2}})
    checks = build_checks({dg.AssetKey(["toy", "scores"])}, tmp_path / "suites")
    instance = dg.DagsterInstance.ephemeral()

    def run_all() -> dict:
        result = None
        for p in plan:
            result = dg.materialize([scores, *checks], instance=instance, partition_key=p,
                                    resources={"io_manager": WarehouseIOManager(), "params": params})
        [evaluation] = result.get_asset_check_evaluations()
        return {"passed": evaluation.passed, **evaluation.metadata["results"].value}

    healthy = run_all()
    assert healthy["passed"] and healthy["error budget per role"]["groups"] == 8  # 4 partitions x 2 roles

    plan["c"] = (["llm_error"] * 10, 0)  # one partition's endpoint is down: all its rows fail,
    plan["a"] = (["ok"] * 30, 0)  # 10 of the table's 60 rows (17%, under the 20% budget)
    down = run_all()
    assert down["00 whole-table error rate"]["success"]  # the table-wide rule alone would pass
    assert not down["passed"] and list(down["error budget per partition"]["over_budget"]) == ["c"]

    plan["c"] = (["ok"] * 10, 0)
    plan["d"] = (["ok"] * 10, 6)  # the judge fails 6 of 10 requests in one partition; rows look fine
    judge_down = run_all()
    assert not judge_down["passed"] and judge_down["error budget per partition"]["success"]
    assert judge_down["error budget per role"]["over_budget"] == {"d: judge": {"errors": 6, "of": 10, "rate": 0.6}}
