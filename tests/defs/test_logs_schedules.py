"""The nightly schedules of the logs group, ticked with build_schedule_context: logs_backfill requests exactly the
log days that are not materialized (as ranged single-run backfill runs), clarilm_nightly refreshes the ClariLM
chain only after new log days."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest

from dagster_project.config import ParamsError
from dagster_project.defs.logs.partitions import LOG_DAYS, RANGE_END_TAG, RANGE_START_TAG, register_days
from dagster_project.defs.logs.schedules import CLARILM_JOB, CLARILM_SCHEDULE, LOGS_SCHEDULE
from tests.defs.test_logs_orchestration import _conv, _defs, _params, _write

LOGS_KEYS = [dg.AssetKey(["logs", n]) for n in ("raw_logs", "raw_logs_rejected", "raw_logs_ledger",
                                                 "log_candidates", "log_clarifications")]


def _materialize(instance: dg.DagsterInstance, keys, day: str | None = None) -> None:
    for key in keys:
        instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=key, partition=day))


def _days(order: list[str], requests) -> list[str]:
    """The partition keys the ranged run requests cover, in the partition order."""
    out = []
    for r in requests:
        first, last = r.tags[RANGE_START_TAG], r.tags[RANGE_END_TAG]
        out += order[order.index(first):order.index(last) + 1]
    return out


@pytest.fixture
def logs_dir(tmp_path: Path) -> Path:
    (tmp_path / "logs").mkdir()
    _write(tmp_path / "logs/a.jsonl", _conv("a1", "2024-05-01"), _conv("a2", "2024-05-02"), _conv("a3", "2024-05-03"))
    _write(tmp_path / "logs/b.jsonl", _conv("b1", "2024-05-05"))
    return tmp_path


def test_logs_backfill_tick_requests_exactly_the_days_not_materialized(logs_dir: Path) -> None:
    defs = _defs(_params(logs_dir))
    schedule = defs.resolve_schedule_def(LOGS_SCHEDULE)
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED and schedule.cron_schedule == "0 2 * * *"
    with dg.instance_for_test() as instance:
        register_days(instance, ["2024-05-01", "2024-05-02", "2024-05-03"])
        _materialize(instance, LOGS_KEYS, "2024-05-02")  # done
        _materialize(instance, LOGS_KEYS[:3], "2024-05-01")  # raw turns stored, extraction never ran: missing
        when = datetime(2024, 5, 6, 2, tzinfo=UTC)
        data = schedule.evaluate_tick(dg.build_schedule_context(instance=instance, scheduled_execution_time=when))
        order = instance.get_dynamic_partitions(LOG_DAYS.name)
        assert order == ["2024-05-01", "2024-05-02", "2024-05-03", "2024-05-05"]  # the new day registered
        assert _days(order, data.run_requests) == ["2024-05-01", "2024-05-03", "2024-05-05"]
        assert [(r.tags[RANGE_START_TAG], r.tags[RANGE_END_TAG]) for r in data.run_requests] == [
            ("2024-05-01", "2024-05-01"), ("2024-05-03", "2024-05-05")]  # 05-04 has no records: no partition
        assert {r.job_name for r in data.run_requests} == {"logs_ingest"}

        for day in ("2024-05-01", "2024-05-03", "2024-05-05"):
            _materialize(instance, LOGS_KEYS, day)
        done = schedule.evaluate_tick(dg.build_schedule_context(instance=instance, scheduled_execution_time=when))
        assert not done.run_requests and "every one of the 4 log days with records is materialized" in done.skip_message


def test_clarilm_nightly_refreshes_only_after_new_log_days(logs_dir: Path) -> None:
    defs = _defs(_params(logs_dir))
    schedule = defs.resolve_schedule_def(CLARILM_SCHEDULE)
    job = defs.resolve_job_def(CLARILM_JOB)
    chain = sorted(job.asset_layer.selected_asset_keys)
    assert chain and {k.path[0] for k in chain} <= {"questions", "facets", "annotations"}
    with dg.instance_for_test() as instance:
        def tick():
            return schedule.evaluate_tick(dg.build_schedule_context(
                instance=instance, repository_def=defs.get_repository_def()))

        assert "no log day is materialized yet" in tick().skip_message
        _materialize(instance, LOGS_KEYS, "2024-05-01")
        [run] = tick().run_requests
        assert run.job_name == CLARILM_JOB
        _materialize(instance, chain)
        assert "newer than every log day" in tick().skip_message
        _materialize(instance, LOGS_KEYS, "2024-05-02")
        assert len(tick().run_requests) == 1


def test_a_bad_cron_string_names_its_params_key(logs_dir: Path) -> None:
    with pytest.raises(ParamsError, match=r"logs.backfill_cron: 'nightly' is not a cron string"):
        _defs(_params(logs_dir, backfill_cron="nightly"))
