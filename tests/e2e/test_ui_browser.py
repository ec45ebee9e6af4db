"""The Dagster UI in a real browser: `make ui`'s server on a throwaway project, driven by Playwright on the
system's Chromium. What the UI must show is read from the same server's GraphQL API, so a page that loads
but renders nothing (or the wrong thing) fails."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import ConsoleMessage, Page, expect, sync_playwright

if TYPE_CHECKING:
    from conftest import UIServer

pytestmark = pytest.mark.e2e

# reads the shipped intent catalogue (no LLM call) and has a GX check: cheap to launch from the UI
ASSET = ["intents", "intent_catalog"]
TIMEOUT_MS = 60_000  # 2 shared CPU cores: the first page load compiles nothing but waits on the code server
RUN_TIMEOUT_MS = 180_000

ASSET_QUERY = """query($k: AssetKeyInput!) { assetNodeOrError(assetKey: $k) { ... on AssetNode {
  assetMaterializations(limit: 1) { runId metadataEntries { label __typename
    ... on IntMetadataEntry { intRepr } ... on TextMetadataEntry { text } ... on PathMetadataEntry { path } } }
  assetChecksOrError { ... on AssetChecks { checks { name executionForLatestMaterialization { status } } } } } } }"""


def _blocked_request(msg: ConsoleMessage, origin: str) -> bool:
    """A resource outside the loopback server that the sandbox (and this test's router) refuses to fetch."""
    url = msg.location.get("url", "")
    return msg.text.startswith("Failed to load resource: net::ERR_") and not url.startswith(origin)


@pytest.fixture
def browser_page(chromium: str, ui_server: UIServer) -> Iterator[tuple[Page, list[str]]]:
    """A Chromium page on the server, every non-loopback request aborted (no internet here, and none wanted),
    and the list of console errors and uncaught page errors it collects."""
    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium)
        context = browser.new_context(viewport={"width": 1600, "height": 1000})
        context.route(lambda url: not url.startswith(ui_server.url + "/"),
                      lambda route: route.abort("internetdisconnected"))
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        page.on("console", lambda m: errors.append(f"console: {m.text} ({m.location.get('url')})")
                if m.type == "error" and not _blocked_request(m, ui_server.url) else None)
        page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
        # a fresh instance greets the first visitor with a community sign-up dialog over the page
        page.add_locator_handler(page.get_by_role("dialog").filter(has_text="Join the Dagster community"),
                                 lambda dialog: dialog.get_by_role("button", name="Skip").click())
        try:
            yield page, errors
        finally:
            browser.close()


def _check_lineage(page: Page, ui: UIServer) -> None:
    """The global lineage graph has a node titled with each asset group the server defines."""
    groups = sorted({n["groupName"] for n in ui.gql("{ assetNodes { groupName } }")["assetNodes"]})
    assert {"benchmark", "evaluation", "intents", "retrieval", "logs"} <= set(groups), groups
    page.goto(f"{ui.url}/asset-groups")
    expect(page.get_by_text("Global asset lineage")).to_be_visible(timeout=TIMEOUT_MS)
    nodes = page.locator("svg foreignObject")
    for group in groups:
        node = nodes.filter(has=page.get_by_text(group, exact=True))
        expect(node, f"lineage node for group {group}").to_have_count(1, timeout=TIMEOUT_MS)
        expect(node).to_be_visible()


def _launch_from_asset_page(page: Page, ui: UIServer, path: str) -> str:
    """Click Materialize on the asset page, follow the launch notice to the run page, wait for the run to
    end there; returns the run id (the run must have succeeded)."""
    page.goto(f"{ui.url}/assets/{path}")
    expect(page.get_by_text("Never materialized")).to_be_visible(timeout=TIMEOUT_MS)
    page.get_by_role("button", name=re.compile(r"Materialize$")).click()
    view = page.get_by_role("region", name=re.compile("Notifications")).get_by_role("link", name="View")
    href = view.get_attribute("href", timeout=TIMEOUT_MS)
    assert href and re.fullmatch(r"/runs/[0-9a-f-]{36}", href), href
    page.goto(ui.url + href)
    final = page.get_by_text(re.compile(r"^(Success|Failure|Canceled)$")).first
    expect(final).to_be_visible(timeout=RUN_TIMEOUT_MS)
    expect(final).to_have_text("Success")
    run_id = href.rsplit("/", 1)[1]
    run = ui.gql("query($id: ID!) { runOrError(runId: $id) { ... on Run { status assetSelection { path } } } }",
                 {"id": run_id})["runOrError"]
    assert run == {"status": "SUCCESS", "assetSelection": [{"path": ASSET}]}, run
    return run_id


def _check_asset_page(page: Page, ui: UIServer, path: str, run_id: str) -> None:
    """The asset page links the new materialization, lists its metadata with values, and its Checks tab
    shows every check of the asset with a passing result."""
    node = ui.gql(ASSET_QUERY, {"k": {"path": ASSET}})["assetNodeOrError"]
    [materialization] = node["assetMaterializations"]
    assert materialization["runId"] == run_id
    values = {e["label"]: e.get("intRepr") or e.get("text") or e.get("path")
              for e in materialization["metadataEntries"] if not e["label"].startswith("dagster/")}
    checks = node["assetChecksOrError"]["checks"]
    assert values and checks, node
    assert {c["executionForLatestMaterialization"]["status"] for c in checks} == {"SUCCEEDED"}, checks

    page.goto(f"{ui.url}/assets/{path}")
    expect(page.locator(f'a[href^="/runs/{run_id}"]').first).to_be_visible(timeout=TIMEOUT_MS)
    for label, value in values.items():
        # a label can also be a column name in the column-schema table (e.g. `source`): the metadata row is the one
        # that shows the value
        rows = page.get_by_role("row").filter(has=page.get_by_role("cell", name=label, exact=True))
        if value is not None:
            rows = rows.filter(has_text=value)
        expect(rows, f"metadata row {label}").to_have_count(1)

    page.get_by_role("tab", name="Checks").click()
    expect(page).to_have_url(re.compile(r"[?&]view=checks"))
    expect(page.get_by_text(f"Checks ({len(checks)})", exact=True)).to_be_visible()
    for check in checks:
        expect(page.get_by_text(check["name"], exact=True).first).to_be_visible()
    expect(page.get_by_text("Succeeded", exact=True)).to_have_count(len(checks))
    expect(page.get_by_text("Passed", exact=True)).to_be_visible()


def test_ui_in_chromium_shows_groups_and_materializes_an_asset_with_its_checks(
        ui_server: UIServer, browser_page: tuple[Page, list[str]], project: Path) -> None:
    page, errors = browser_page
    path = "/".join(ASSET)
    _check_lineage(page, ui_server)
    run_id = _launch_from_asset_page(page, ui_server, path)
    assert (project / "assets" / f"{path}.parquet").exists()
    _check_asset_page(page, ui_server, path, run_id)
    assert not errors, "browser console errors:\n" + "\n".join(errors)
