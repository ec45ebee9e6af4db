"""`make ui` serves the Dagster UI on 127.0.0.1 with the asset groups, and a run launched there materializes."""

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request

import pytest
from project_support import BIN

pytestmark = pytest.mark.e2e


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _gql(port: int, query: str, variables: dict | None = None) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", method="POST",
                                 data=json.dumps({"query": query, "variables": variables or {}}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        body = json.loads(r.read())
    assert "errors" not in body, body
    return body["data"]


@pytest.fixture
def webserver(project):
    port = _free_port()
    env = {**os.environ, "DAGSTER_HOME": str(project / ".dagster"), "PATH": f"{BIN}:{os.environ['PATH']}"}
    (project / ".dagster").mkdir(exist_ok=True)
    (project / ".dagster" / "dagster.yaml").touch()
    proc = subprocess.Popen([str(BIN / "dagster"), "dev", "-h", "127.0.0.1", "-p", str(port), "-m",
                             "dagster_project.definitions"], cwd=project, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2)
                break
            except OSError:
                time.sleep(1)
        else:
            pytest.fail("dagster dev did not come up within 120 s")
        yield port
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # dagster dev ignores plain SIGTERM to itself: kill the group
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def test_ui_lists_groups_and_launches_a_materialization(webserver, project):
    port = webserver
    with socket.create_connection(("127.0.0.1", port)):
        pass
    nodes = _gql(port, "{ assetNodes { assetKey { path } groupName } }")["assetNodes"]
    groups = {n["groupName"] for n in nodes}
    assert {"benchmark", "evaluation"} <= groups

    repo = _gql(port, "{ repositoriesOrError { ... on RepositoryConnection { nodes { name location { name } } } } }")
    node = repo["repositoriesOrError"]["nodes"][0]
    launched = _gql(port, """
      mutation($p: ExecutionParams!) { launchRun(executionParams: $p) {
        __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }""",
                    {"p": {"selector": {"repositoryLocationName": node["location"]["name"],
                                        "repositoryName": node["name"], "jobName": "__ASSET_JOB",
                                        "assetSelection": [{"path": ["benchmark", "taxonomy"]}]}}})
    assert launched["launchRun"]["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["launchRun"]["run"]["runId"]
    deadline = time.time() + 180
    status = None
    while time.time() < deadline:
        status = _gql(port, "query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }",
                      {"id": run_id})["runOrError"]["status"]
        if status in ("SUCCESS", "FAILURE", "CANCELED"):
            break
        time.sleep(2)
    assert status == "SUCCESS"
    assert (project / "assets/benchmark/taxonomy.parquet").exists()
