"""DVC experiments on a throwaway checkout: headline metrics that `dvc metrics diff` / `dvc exp show` compare,
and `dvc exp run --temp` served from the project's LLM cache and recorded in its Dagster history."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import pytest
import yaml

from dagster_project.reporting.headline import SOURCE_GROUPS
from tests.cli.test_cli_metrics import write_tables
from tests.project_support import BIN, make_project

HEADLINE_COLUMNS = r"Experiment|rev|(evaluation|retrieval|intents|double_turn|clarilm)\."  # as in docs/dvc-experiments.md

pytestmark = pytest.mark.e2e


def dvc(project: Path, *args: str, timeout: int = 600) -> str:
    """Run dvc as a user would: no DAGSTER_HOME / CLARIFY_HOME set; the copy's own package first on the path."""
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(Path.home()), "DVC_NO_ANALYTICS": "1",
           "GX_ANALYTICS_ENABLED": "false", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(project)}
    proc = subprocess.run([str(BIN / "dvc"), *args], cwd=project, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert proc.returncode == 0, f"dvc {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def git(project: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=project, check=True,
                   capture_output=True)


def test_metrics_diff_and_exp_show_list_headline_numbers(tmp_path):
    project = make_project(tmp_path)
    write_tables(project / "assets", accuracy=0.5)
    for group in SOURCE_GROUPS:  # the metrics stage's deps: groups without tables are left out of the metrics
        (project / "assets" / group).mkdir(parents=True, exist_ok=True)
        (project / "assets" / group / ".keep").touch()
    dvc(project, "repro", "--single-item", "metrics")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "baseline metrics")
    write_tables(project / "assets", accuracy=0.75)
    dvc(project, "repro", "--single-item", "metrics")

    diff = json.loads(dvc(project, "metrics", "diff", "--json"))
    ev = diff["metrics/evaluation.json"]["evaluation.clarifymt.smollm2.base.accuracy"]
    assert (ev["old"], ev["new"]) == (0.5, 0.75)

    shown = json.loads(dvc(project, "exp", "show", "--json"))
    metrics = next(e for e in shown if e["rev"] == "workspace")["data"]["metrics"]
    assert set(metrics) == {f"metrics/{g}.json" for g in ("evaluation", "retrieval", "intents", "double_turn",
                                                           "clarilm")}
    assert metrics["metrics/evaluation.json"]["data"]["evaluation"]["clarifymt"]["smollm2"]["base"]["accuracy"] == 0.75
    assert metrics["metrics/retrieval.json"]["data"]["retrieval"]["bm25"]["multi_turn"]["text_only"]["mrr"] == 0.5
    # the metrics-only view of docs/dvc-experiments.md (DVC 3 has no --only-metrics): headline columns and nothing else
    table = dvc(project, "exp", "show", "--csv", "--drop", ".*", "--keep", HEADLINE_COLUMNS).splitlines()
    header = table[0].split(",")
    assert header[0] == "Experiment" and "evaluation.clarifymt.smollm2.base.accuracy" in header
    assert "clarilm.logs.log_candidates.pass_rate" in header and not any(c.startswith("llm.") for c in header)
    assert len(table) == 3  # workspace and the baseline commit

    plots = json.loads(dvc(project, "plots", "diff", "HEAD", "--json"))["data"]
    base = plots["plots/accuracy_by_turn/clarifymt-smollm2-base.csv"][0]["content"]["data"]["values"]
    assert {(r["rev"], r["turn"], r["accuracy"]) for r in base} == {
        ("HEAD", "1", "0.75"), ("HEAD", "2", "0.25"), ("workspace", "1", "1.0"), ("workspace", "2", "0.25")}


def _cache_hits(project: Path) -> tuple[int, int]:
    """(cache hits, samples asked) recorded in the project's LLM cache over all runs."""
    from dagster_project.llm.cache import LLMCache

    usage = LLMCache(str(project / ".cache" / "llm_cache.sqlite")).usage_by_role()
    return sum(u["cache_hits"] or 0 for u in usage), sum(u["samples"] or 0 for u in usage)


def _dagster_runs(project: Path) -> int:
    with sqlite3.connect(project / ".dagster" / "history" / "runs.db") as con:
        return con.execute("select count(*) from runs").fetchone()[0]


def test_exp_run_temp_reuses_the_projects_llm_cache_and_run_history(tmp_path):
    project = make_project(tmp_path)
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["logs"] |= {"date_from": "2024-05-01", "date_to": "2024-05-01", "max_extractions": 2}  # one day, one run
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    dvc(project, "repro", "logs")  # 2 extraction calls on the embedded model
    hits0, asked0 = _cache_hits(project)
    runs0 = _dagster_runs(project)
    assert asked0 - hits0 >= 1, "the tiny logs stage should have sent extraction calls"
    git(project, "add", "-A")
    git(project, "commit", "-qm", "logs built")

    # fewer extractions: the same first candidates, so every call is already in the cache
    dvc(project, "exp", "run", "--temp", "-S", "logs.max_extractions=1", "logs")
    hits1, asked1 = _cache_hits(project)
    assert hits1 - hits0 >= 1 and asked1 - asked0 == hits1 - hits0, (hits0, asked0, hits1, asked1)
    assert _dagster_runs(project) > runs0  # the temporary copy's runs are in the project's history
    assert "max_extractions" in dvc(project, "exp", "show", "--csv")
