"""Evaluation partitions in parallel (runs/parallel.py): worker processes on this machine, then a local Dask cluster
with the subjects on a pool of two servers. The subjects answer over HTTP from a stub that holds every reply until
both subjects have asked, so the runs only succeed quickly if they ran at the same time."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
import yaml
from openai_stub import running_stub

from dagster_project.runs.group_runs import group_stages
from dagster_project.config import load_params
from dagster_project.core.clarifymt.external import import_dataset
from dagster_project.definitions import build_definitions
from dagster_project.io.writers import write_parquet_atomic
from dagster_project.runs.parallel import Execution, run_stage
from dagster_project.runs.instance import PID_TAG
from dagster_project.lib.warehouse import read_asset

DIALOGUES = 3  # x 2 turns, per partition


@pytest.fixture(autouse=True)
def _loopback(monkeypatch):
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


def _project(tmp_path: Path, subject_urls: list[str]) -> str:
    """A project folder (the working directory) with params, the benchmark's dialogues and a built
    external_dialogues stage; returns the params path. Subjects a and b run the base method."""
    roles = {name: {"backend": "openai", "model": f"model-{name}", "base_urls": subject_urls, "timeout_s": 300,
                    "max_retries": 0} for name in ("a", "b")}
    params = {"llm": {"cache_path": str(tmp_path / "cache.sqlite"), "roles": {"default": roles["a"]},
                      "subjects": roles},
              "evaluation": {"methods": ["base"], "bertscore": False, "max_dialogues": None}}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    with (tmp_path / "dialogues.jsonl").open("w") as fh:
        for d in range(DIALOGUES):
            fh.write(json.dumps({"dialogue_id": f"d{d}", "turn": 1, "user": f"Plan trip {d}?", "persona": "precise",
                                 "reference_action": "clarify", "reference_question": "Where to?"}) + "\n")
            fh.write(json.dumps({"dialogue_id": f"d{d}", "turn": 2, "user": "Porto.", "persona": "precise",
                                 "reference_action": "answer"}) + "\n")
    turns = import_dataset("clarifymt", "generic", tmp_path / "dialogues.jsonl").turns
    write_parquet_atomic(turns, tmp_path / "assets/benchmark/persona_dialogues.parquet")
    return str(path)


def _predictions_stage(params: str, instance: dg.DagsterInstance):
    """Builds the stage before predictions here, in this process; returns the predictions stage."""
    defs = build_definitions(load_params(params))
    (_, first), (pdef, keys), *_ = group_stages(defs, "evaluation")
    assert defs.resolve_implicit_global_asset_job_def().execute_in_process(asset_selection=first,
                                                                           instance=instance).success
    return pdef, keys


def _check_predictions(tmp_path: Path, requests: int) -> None:
    p = read_asset(tmp_path / "assets", "evaluation", "predictions")
    assert p.height == 2 * 2 * DIALOGUES and set(p["status"]) == {"ok"}
    assert p.group_by("subject", "method").len().sort("subject")["len"].to_list() == [2 * DIALOGUES] * 2
    assert set(p.filter(pl.col("turn") == 1)["action"]) == {"clarify"}
    with sqlite3.connect(tmp_path / "cache.sqlite") as con:
        rows, keys = con.execute("SELECT count(*), count(DISTINCT key) FROM responses").fetchone()
    assert rows == keys == requests == 2 * 2 * DIALOGUES  # one reply per request, none lost, none paid twice


def test_two_partitions_run_at_once_in_worker_processes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with running_stub(rendezvous=frozenset({"model-a", "model-b"})) as stub, \
            dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        params = _project(tmp_path, [stub.url])
        pdef, keys = _predictions_stage(params, instance)
        partitions = pdef.get_partition_keys()
        outcomes = run_stage(Execution(processes=2, params=params), keys, pdef, partitions, instance)
        runs = [instance.get_run_by_id(o.run_id) for o in outcomes]
    assert [o.success for o in outcomes] == [True, True], outcomes
    assert [r.tags["dagster/partition"] for r in runs] == [str(k) for k in partitions] == ["base|a", "base|b"]
    assert str(os.getpid()) not in {r.tags[PID_TAG] for r in runs}  # each run in a worker process
    assert stub.met is True  # both subjects' requests were in flight together
    _check_predictions(tmp_path, len(stub.requests))


def test_partitions_on_a_local_dask_cluster_with_a_pool_of_servers(tmp_path, monkeypatch):
    distributed = pytest.importorskip("distributed")
    monkeypatch.chdir(tmp_path)  # Dask workers start here: assets/ and the cache resolve from it
    both = frozenset({"model-a", "model-b"})
    with running_stub(rendezvous=both) as one, running_stub(rendezvous=both) as two, \
            dg.instance_for_test(temp_dir=str(tmp_path)) as instance, \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                     host="127.0.0.1") as cluster, distributed.Client(cluster) as client:
        params = _project(tmp_path, [one.url, two.url])
        pdef, keys = _predictions_stage(params, instance)
        execution = Execution(processes=2, params=params, dask_address=cluster.scheduler_address)
        outcomes = run_stage(execution, keys, pdef, pdef.get_partition_keys(), instance)
        tasks = client.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.task_prefixes))
    assert [o.success for o in outcomes] == [True, True], outcomes
    steps = [t for t in tasks if t.startswith("clarify_dask_") and t.endswith(".evaluation__predictions")]
    assert len(steps) == 2, tasks  # each partition's step ran as a Dask task of its own
    assert one.requests and two.requests  # the pool: both servers answered
    assert one.met is True and two.met is True
    _check_predictions(tmp_path, len(one.requests) + len(two.requests))
