"""A run whose process is killed stays STARTED in Dagster; the next `clarify materialize` marks it failed
(issue 16 item 9). The kill is real: kill -9 of a process in the middle of a Dagster run."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
from typer.testing import CliRunner

from dagster_project.cli import app
from dagster_project.runs.instance import sweep_orphaned_runs

REPO = Path(__file__).resolve().parents[2]
SLOW_RUN = """
import sys, time
import dagster as dg
from dagster_project.runs.group_runs import materialize_group

@dg.asset(group_name="g")
def slow() -> None:
    open(sys.argv[1], "w").write("started")
    time.sleep(300)

with dg.DagsterInstance.get() as instance:
    materialize_group(dg.Definitions(assets=[slow]), "g", instance)
"""


def statuses(home: Path) -> dict[str, dg.DagsterRunStatus]:
    with dg.DagsterInstance.from_config(str(home)) as instance:
        return {r.run_id: r.status for r in instance.get_runs()}


def test_killed_run_is_marked_failed_on_next_start(tmp_path, monkeypatch):
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").touch()
    marker = tmp_path / "started"
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", SLOW_RUN, str(marker)], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the slow run did not start"
            time.sleep(0.2)
        [(run_id, status)] = statuses(home).items()
        assert status == dg.DagsterRunStatus.STARTED
        with dg.DagsterInstance.from_config(str(home)) as instance:
            assert sweep_orphaned_runs(instance) == []  # its process is alive: not an orphan
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert statuses(home) == {run_id: dg.DagsterRunStatus.STARTED}  # what Dagster alone would show forever

    # the next `clarify materialize` (here of a group with no assets: nothing else runs) sweeps it
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("CLARIFY_PARAMS", "params.yaml")  # the CLI sets both for its runs; restored after the test
    result = CliRunner().invoke(app, ["materialize", "no_such_group"])
    assert f"run {run_id}: its process is gone, marked failed" in result.output.replace("\n", "")
    assert statuses(home) == {run_id: dg.DagsterRunStatus.FAILURE}
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert sweep_orphaned_runs(instance) == []  # once is enough
