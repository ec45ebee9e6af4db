"""`clarify report` writes the transcript viewer: one self-contained page per evaluated dataset, linked from
assets/index.html, whose embedded data decodes back to the predictions, judge scores and user utterances."""

from __future__ import annotations

import base64
import gzip
import json
import re
from pathlib import Path

import polars as pl
from typer.testing import CliRunner
from viewer_data import METHODS, write_assets

from dagster_project.cli import app
from dagster_project.lib.warehouse import read_asset
from dagster_project.reporting.transcripts import agent_blocks, agent_outputs, dataset_turns, encode, render_page


def _data(page: str) -> dict:
    """The page's embedded data, unpacked as its script does (base64, gzip, JSON)."""
    [blob] = re.findall(r"<script id='data' type='application/gzip\+base64'>(.*?)</script>", page, re.S)
    return json.loads(gzip.decompress(base64.b64decode(blob)))


def _agent(page: str) -> list[str | None]:
    """The module outputs of every prediction, unpacked from the page's blocks."""
    [blocks] = re.findall(r"<script id='agent-data' type='application/json'>(.*?)</script>", page, re.S)
    return [x for b in json.loads(blocks) for x in json.loads(gzip.decompress(base64.b64decode(b)))]


def _rows(data: dict, agent: list[str | None]) -> list[dict]:
    """The encoded page data decoded back to one dict per prediction (what the page's script reads)."""
    s, d, t, p = data["s"], data["d"], data["t"], data["p"]
    text = lambda i: None if i < 0 else s[i]  # noqa: E731
    out = []
    for di in range(len(d["id"])):
        t_end = d["t0"][di + 1] if di + 1 < len(d["id"]) else len(t["turn"])
        for ti in range(d["t0"][di], t_end):
            p_end = t["p0"][ti + 1] if ti + 1 < len(t["turn"]) else len(p["subject"])
            for pi in range(t["p0"][ti], p_end):
                out.append({"dialogue_id": text(d["id"][di]), "persona": text(d["persona"][di]),
                            "turn": t["turn"][ti], "user": text(t["user"][ti]),
                            "reference_action": text(t["ref"][ti]), "reference_question": text(t["refq"][ti]),
                            "subject": text(p["subject"][pi]), "method": text(p["method"][pi]),
                            "action": text(p["action"][pi]), "ok": p["ok"][pi], "reply": text(p["reply"][pi]),
                            "score": p["score"][pi], "agent": agent[pi] if p["agent"][pi] else None})
    return out


def test_report_writes_one_linked_page_per_dataset_with_every_prediction(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    counts = write_assets(Path("assets"), n_queries=2, external=1)
    result = CliRunner().invoke(app, ["report"])
    assert result.exit_code == 0, result.output
    pages = {p.stem: p for p in Path("assets/transcripts").glob("*.html")}
    assert set(pages) == {"clarifymt", "clariq"}
    index = Path("assets/index.html").read_text()
    assert 'href="transcripts/clarifymt.html"' in index and 'href="transcripts/clariq.html"' in index

    page = pages["clarifymt"].read_text()
    assert not re.search(r"""(src|href)=["']?https?:""", page)  # self-contained: nothing fetched
    data = _data(page)
    rows = _rows(data, _agent(page))
    assert len(_agent(page)) == data["n"]["predictions"]
    preds = read_asset("assets", "evaluation", "predictions").filter(pl.col("dataset") == "clarifymt")
    assert len(rows) == preds.height == data["n"]["predictions"]
    assert data["n"]["dialogues"] == 2 * 6
    assert counts["predictions"] == read_asset("assets", "evaluation", "predictions").height
    assert {r["method"] for r in rows} == set(METHODS)

    bench = read_asset("assets", "benchmark", "persona_dialogues")
    first = bench.filter((pl.col("dialogue_id") == "q00001-contradictory") & (pl.col("turn") == 3)).row(0, named=True)
    at = [r for r in rows if r["dialogue_id"] == "q00001-contradictory" and r["turn"] == 3]
    assert len(at) == len(METHODS)
    assert {r["user"] for r in at} == {first["user_utterance"]}
    assert {r["reference_action"] for r in at} == {"clarify"}
    want = preds.filter((pl.col("dialogue_id") == "q00001-contradictory") & (pl.col("turn") == 3))
    for r in at:
        p = want.filter(pl.col("method") == r["method"]).row(0, named=True)
        assert (r["action"], r["reply"]) == (p["action"], p["response"])
        right = p["action"] == "clarify" if p["status"] != "parse_error" else False
        assert r["ok"] == int(right)
        assert (r["agent"] is not None) == r["method"].startswith("clarify_agent")

    agent = json.loads(next(r["agent"] for r in rows if r["method"] == "clarify_agent"))
    assert {"perceiver", "forecaster", "plan", "slots", "decided_by"} <= set(agent)
    assert "raw" not in agent and "raw_of_failed_modules" not in agent  # raw replies only of failed modules

    judge = read_asset("assets", "evaluation", "judge_scores").filter(
        (pl.col("dataset") == "clarifymt") & pl.col("score").is_not_null())
    scored = {(r["subject"], r["method"], r["dialogue_id"], r["turn"]): r["score"] for r in rows if r["score"] >= 0}
    assert scored == {(j["subject"], j["method"], j["dialogue_id"], j["turn"]): j["score"]
                      for j in judge.iter_rows(named=True)}

    clariq_page = pages["clariq"].read_text()
    clariq = _rows(_data(clariq_page), _agent(clariq_page))
    assert clariq and all(r["user"] and r["user"].startswith(("Query 0", "Precise", "Partial", "Off", "Contra",
                                                                "Factually", "Refusal")) for r in clariq)


def test_page_data_cannot_break_out_of_its_script_element(tmp_path: Path) -> None:
    write_assets(tmp_path, n_queries=1, methods=("base",))
    [turns] = dataset_turns(tmp_path)
    evil = "</script><script>alert(1)</script><!--"
    turns.preds = turns.preds.with_columns(response=pl.lit(evil))
    page = render_page(encode(turns, agent_outputs(turns)), agent_blocks(agent_outputs(turns)), "now")
    assert "alert(1)" not in page and "<!--" not in page.split("<script id='data'")[1]
    assert evil in _data(page)["s"]


def test_report_without_predictions_writes_only_the_index(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["report"])
    assert result.exit_code == 0, result.output
    assert Path("assets/index.html").exists() and not Path("assets/transcripts").exists()
