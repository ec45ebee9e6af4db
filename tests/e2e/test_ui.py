"""`make ui` serves the Dagster UI on 127.0.0.1 with the asset groups, and a run launched there materializes
(GraphQL level; tests/e2e/test_ui_browser.py drives the same server in Chromium)."""

import time

import pytest

pytestmark = pytest.mark.e2e


def test_ui_lists_groups_and_launches_a_materialization(ui_server, project):
    nodes = ui_server.gql("{ assetNodes { assetKey { path } groupName } }")["assetNodes"]
    groups = {n["groupName"] for n in nodes}
    assert {"benchmark", "evaluation"} <= groups

    repo = ui_server.gql("{ repositoriesOrError { ... on RepositoryConnection { nodes { name location { name } } } } }")
    node = repo["repositoriesOrError"]["nodes"][0]
    launched = ui_server.gql("""
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
        status = ui_server.gql("query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }",
                      {"id": run_id})["runOrError"]["status"]
        if status in ("SUCCESS", "FAILURE", "CANCELED"):
            break
        time.sleep(2)
    assert status == "SUCCESS"
    assert (project / "assets/benchmark/taxonomy.parquet").exists()
