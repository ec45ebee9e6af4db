"""The transcript viewer in a real browser: a page `clarify report` writes, opened from disk in the system's
Chromium (every network request refused): filter the list, open a dialogue, see each method's reply, the
reference and ClarifyAgent's module outputs, with no console error."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from playwright.sync_api import expect, sync_playwright
from viewer_data import METHODS, write_assets

from dagster_project.lib.warehouse import read_asset
from dagster_project.reporting import transcripts
from dagster_project.reporting.transcripts import write_transcripts

pytestmark = pytest.mark.e2e


def test_viewer_filters_opens_a_dialogue_and_shows_every_reply(chromium: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(transcripts, "AGENT_CHUNK", 37)  # several packed blocks of module outputs: index math checked
    write_assets(tmp_path, n_queries=3)
    [page_file] = write_transcripts(tmp_path)
    preds = read_asset(tmp_path, "evaluation", "predictions")
    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 900})
            context.route(lambda url: not url.startswith("file://"), lambda route: route.abort("internetdisconnected"))
            page = context.new_page()
            page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}")
                    if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            page.on("request", lambda r: errors.append(f"request: {r.url}") if not r.url.startswith("file:") else None)
            page.goto(page_file.as_uri())

            items = page.locator("#list button")
            expect(page.locator("#count")).to_have_text("18 of 18 dialogues")
            expect(items).to_have_count(18)

            page.select_option("#f-persona", label="refusal")
            expect(page.locator("#count")).to_have_text("3 of 18 dialogues")
            expect(items).to_have_count(3)
            for text in items.all_inner_texts():
                assert "· refusal ·" in text, text

            page.select_option("#f-method", label="clarify_agent")
            page.select_option("#f-outcome", label="has a wrong reply")
            agent = preds.filter((pl.col("method") == "clarify_agent") & (pl.col("persona") == "refusal"))
            wrong = agent.filter(pl.col("action") != pl.col("reference_action")
                                 )["dialogue_id"].unique().sort().to_list()
            expect(page.locator("#count")).to_have_text(f"{len(wrong)} of 18 dialogues")
            assert [t.split(" · ")[0] for t in items.all_inner_texts()] == wrong

            page.select_option("#f-method", label="all")
            page.select_option("#f-outcome", label="all")
            dialogue = "q00001-refusal"
            page.locator(f'#list button[data-dialogue="{dialogue}"]').click()
            view = page.locator("#dialogue")
            expect(view.locator("h2")).to_have_text(dialogue)
            turns = view.locator("section.turn")
            expect(turns).to_have_count(2)  # Refusal: 2 turns
            rows = preds.filter(pl.col("dialogue_id") == dialogue).sort("turn", "method")
            for turn in (1, 2):
                section = view.locator(f'section.turn[data-turn="{turn}"]')
                at = rows.filter(pl.col("turn") == turn)
                user = read_asset(tmp_path, "benchmark", "persona_dialogues").filter(
                    (pl.col("dialogue_id") == dialogue) & (pl.col("turn") == turn))["user_utterance"][0]
                expect(section.locator("p.user")).to_contain_text(user)
                expect(section.locator("p.ref")).to_contain_text(f"Reference action: {at['reference_action'][0]}")
                body = section.locator("tbody tr")
                expect(body).to_have_count(len(METHODS))
                for r in at.iter_rows(named=True):
                    row = section.locator(f'tbody tr[data-method="{r["method"]}"]')
                    expect(row.locator("td").nth(2)).to_have_text(r["action"])
                    expect(row.locator("td.reply")).to_have_text(r["response"] or "")

            details = view.locator('section.turn[data-turn="2"] tr[data-method="clarify_agent_no_planner"] details')
            details.locator("summary").click()
            agent = preds.filter((pl.col("dialogue_id") == dialogue) & (pl.col("turn") == 2)
                                 & (pl.col("method") == "clarify_agent_no_planner")).row(0, named=True)
            forecast = json.loads(agent["trace"])["forecaster"]
            expect(details.locator("pre")).to_contain_text('"perceiver"')
            expect(details.locator("pre")).to_contain_text(f'"forecaster": "{forecast}"')  # this row's, not another's
            expect(details.locator("pre")).to_contain_text('"decided_by": "planner"')
            assert page.url.endswith("#q00001-refusal")
        finally:
            browser.close()
    assert not errors, "\n".join(errors)
