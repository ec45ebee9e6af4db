"""The logs group's orchestration in-process: the new-files sensor, ranged (single-run) backfills through the
CLI's group runner, and the automation that refreshes the ClariLM groups after new log days land."""

import json
import os
from pathlib import Path

import dagster as dg
import polars as pl
import yaml
from fakes import ScriptedBackend, scripted_llm

from dagster_project.runs.group_runs import materialize_group
from dagster_project.config import load_params
from dagster_project.core.clarilm.logs import days_to_ingest
from dagster_project.definitions import build_definitions
from dagster_project.defs.logs import assets as logs
from dagster_project.defs.logs.automation import SENSOR as REFRESH_SENSOR
from dagster_project.defs.logs.partitions import LOG_DAYS, RANGE_END_TAG, RANGE_START_TAG, register_days
from dagster_project.defs.logs.sensors import SENSOR
from tests.defs.test_clarilm import WordEmbedder, clarilm_responder


def _conv(cid: str, day: str) -> dict:
    return {"conversation_hash": cid, "timestamp": f"{day}T10:00:00Z",
            "conversation": [{"role": "user", "content": "Can you book a table?"},
                             {"role": "assistant", "content": "Which restaurant would you like?"},
                             {"role": "user", "content": "The Italian place on Main Street."}]}


def _write(path: Path, *convs: dict) -> None:
    path.write_text("".join(json.dumps(c) + "\n" for c in convs))


def _params(tmp_path: Path, **logs_cfg):
    data = {"llm": {"cache_path": str(tmp_path / "cache.sqlite")},
            "logs": {"paths": [str(tmp_path / "logs/*.jsonl")], "default_log_date": "2024-05-01", **logs_cfg}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(data))
    return load_params(tmp_path / "params.yaml")


def _defs(params):
    return build_definitions(params, llm=scripted_llm(params, ScriptedBackend(clarilm_responder)),
                             embedder=WordEmbedder())


class _Sensor:
    """Ticks of the logs sensor against one instance, applying its partition requests as the daemon would."""

    def __init__(self, params):
        self.defn = _defs(params).resolve_sensor_def(SENSOR)
        self.instance = dg.DagsterInstance.ephemeral()
        self.cursor = None

    def tick(self):
        data = self.defn.evaluate_tick(dg.build_sensor_context(instance=self.instance, cursor=self.cursor))
        for req in data.dynamic_partitions_requests or []:
            self.instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
        self.cursor = data.cursor or self.cursor
        return data

    @staticmethod
    def ranges(data) -> list[tuple[str, str]]:
        return [(r.tags[RANGE_START_TAG], r.tags[RANGE_END_TAG]) for r in data.run_requests]


def test_sensor_requests_only_the_days_of_new_or_changed_files(tmp_path):
    (tmp_path / "logs").mkdir()
    _write(tmp_path / "logs/a.jsonl", _conv("a1", "2024-05-01"), _conv("a2", "2024-05-02"))
    sensor = _Sensor(_params(tmp_path))

    first = sensor.tick()
    assert _Sensor.ranges(first) == [("2024-05-01", "2024-05-02")]  # one run over both days
    assert sensor.instance.get_dynamic_partitions(LOG_DAYS.name) == ["2024-05-01", "2024-05-02"]

    again = sensor.tick()
    assert not again.run_requests and "no new, changed or removed files among the 1" in again.skip_message

    _write(tmp_path / "logs/b.jsonl", _conv("b1", "2024-05-04"))
    new_file = sensor.tick()
    assert _Sensor.ranges(new_file) == [("2024-05-04", "2024-05-04")]

    _write(tmp_path / "logs/a.jsonl", _conv("a1", "2024-05-01"), _conv("a3", "2024-05-03"))  # 05-02 moved to 05-03
    os.utime(tmp_path / "logs/a.jsonl", ns=(1, 1))  # a different mtime even when the clock is coarse
    changed = sensor.tick()
    # touched: the file's old days (05-01, 05-02) and its new one (05-03, registered last): not 05-04
    assert _Sensor.ranges(changed) == [("2024-05-01", "2024-05-02"), ("2024-05-03", "2024-05-03")]
    assert sensor.instance.get_dynamic_partitions(LOG_DAYS.name)[-1] == "2024-05-03"

    (tmp_path / "logs/b.jsonl").unlink()
    assert _Sensor.ranges(sensor.tick()) == [("2024-05-04", "2024-05-04")]  # a removed file's day is rebuilt


def test_sensor_skips_with_the_reason_when_nothing_matches_or_the_window_excludes(tmp_path):
    sensor = _Sensor(_params(tmp_path))
    empty = sensor.tick()
    assert not empty.run_requests and "logs.paths" in empty.skip_message and "matched no files" in empty.skip_message
    (tmp_path / "logs").mkdir()
    _write(tmp_path / "logs/a.jsonl", _conv("a1", "2024-04-01"))
    windowed = _Sensor(_params(tmp_path, date_from="2024-05-01"))
    data = windowed.tick()
    assert not data.run_requests and "logs.date_from / date_to" in data.skip_message


def test_the_group_runner_ingests_a_range_of_days_in_one_run_that_reads_each_file_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "logs").mkdir()
    _write(tmp_path / "logs/a.jsonl", *(_conv(f"a{i}", f"2024-05-{i:02d}") for i in range(1, 6)))
    _write(tmp_path / "logs/b.jsonl", _conv("b1", "2024-05-03"))
    params = _params(tmp_path)
    instance = dg.DagsterInstance.ephemeral()
    days, _ = days_to_ingest(params.logs)
    register_days(instance, days)
    reads = []
    real = logs.stream_days
    monkeypatch.setattr(logs, "stream_days", lambda paths, *a: reads.append(list(paths)) or real(paths, *a))
    results = materialize_group(_defs(params), logs.GROUP, instance)
    assert [r.success for r in results] == [True]  # one run for the five days
    assert len(reads) == 1 and len(reads[0]) == 2  # both files, read once
    stored = sorted(p.stem for p in (tmp_path / "assets/logs/raw_logs").glob("*.parquet"))
    assert stored == days == [f"2024-05-{i:02d}" for i in range(1, 6)]
    raw = pl.read_parquet(tmp_path / "assets/logs/raw_logs/2024-05-03.parquet")
    assert sorted(raw["conversation_id"].unique()) == ["a3", "b1"]
    ledger = pl.read_parquet(tmp_path / "assets/logs/raw_logs_ledger/2024-05-03.parquet")
    assert (ledger["file_records_read"] == ledger["file_records_counted"]).all() and ledger["records_read"].sum() == 2
    mats = instance.fetch_materializations(dg.AssetKey(["logs", "raw_logs"]), limit=10).records
    assert sorted(m.partition_key for m in mats) == days  # one materialization per day, from one run
    extracted = instance.fetch_materializations(dg.AssetKey(["logs", "log_clarifications"]), limit=10).records
    calls = {m.partition_key: m.asset_materialization.metadata["llm/requests"].value for m in extracted}
    rows = {d: pl.read_parquet(tmp_path / f"assets/logs/log_clarifications/{d}.parquet").height for d in days}
    assert calls == rows and calls["2024-05-03"] == 2 * calls["2024-05-01"]  # each day its own calls, not the run's total


def test_new_log_days_trigger_the_clarilm_refresh(tmp_path):
    (tmp_path / "logs").mkdir()
    _write(tmp_path / "logs/a.jsonl", _conv("a1", "2024-05-01"))
    defs = _defs(_params(tmp_path))
    assert {s.name for s in defs.sensors} >= {SENSOR, REFRESH_SENSOR}
    instance = dg.DagsterInstance.ephemeral()
    register_days(instance, ["2024-05-01", "2024-05-02"])
    instance.report_runless_asset_event(dg.AssetMaterialization(["questions", "personas"]))  # no logs upstream
    for name in ("raw_logs", "raw_logs_rejected", "raw_logs_ledger", "log_candidates", "log_clarifications"):
        instance.report_runless_asset_event(dg.AssetMaterialization(["logs", name], partition="2024-05-01"))
    waiting = dg.evaluate_automation_conditions(defs, instance)
    assert waiting.total_requested == 0  # day 05-02 is registered but not ingested yet: no refresh
    for name in ("raw_logs", "raw_logs_rejected", "raw_logs_ledger", "log_candidates", "log_clarifications"):
        instance.report_runless_asset_event(dg.AssetMaterialization(["logs", name], partition="2024-05-02"))
    landed = dg.evaluate_automation_conditions(defs, instance, cursor=waiting.cursor)
    keys = defs.resolve_asset_graph().get_all_asset_keys()
    requested = {k.to_user_string() for k in keys if landed.get_num_requested(k)}
    assert {"questions/seed_questions_ql", "facets/facet_candidates_log", "annotations/dpo_dataset"} <= requested
    assert not any(k.startswith(("logs/", "benchmark/", "evaluation/")) for k in requested)
