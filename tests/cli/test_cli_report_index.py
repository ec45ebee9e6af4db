"""`clarify report`: one self-contained index page with a section per group, read from hand-written asset tables."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
from test_cli_metrics import write_tables  # tests/cli/, the tables every headline reads
from typer.testing import CliRunner

from dagster_project.cli import app
from dagster_project.reporting.report_index import GROUPS


def _sections(page: str) -> dict[str, str]:
    return dict(re.findall(r'<section id="group-([\w-]+)">(.*?)</section>', page, re.DOTALL))


def _report(tmp_path: Path, monkeypatch) -> str:
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["report"])
    assert res.exit_code == 0, res.output
    index = tmp_path / "assets" / "index.html"
    assert res.stdout.splitlines()[0] == str(index)
    return index.read_text()


def test_every_group_gets_a_section_and_unbuilt_ones_say_so(tmp_path, monkeypatch):
    write_tables(tmp_path / "assets")
    (tmp_path / "assets/training").mkdir()
    pl.DataFrame({"step": [1, 2], "loss": [2.0, 1.5]}).write_parquet(tmp_path / "assets/training/loss_curve.parquet")
    (tmp_path / "assets/extra").mkdir()
    pl.DataFrame({"x": [1]}).write_parquet(tmp_path / "assets/extra/table.parquet")
    page = _report(tmp_path, monkeypatch)
    sec = _sections(page)
    assert list(sec) == [*GROUPS, "extra"]  # registry order, then groups found on disk
    for group in ("benchmark", "questions", "facets"):
        assert "not materialized" in sec[group], group
    for group in ("evaluation", "retrieval", "intents", "double_turn", "logs", "annotations", "training"):
        assert "not materialized" not in sec[group], group
    ev = sec["evaluation"]
    assert "<td>base</td><td>8</td><td>0.500</td>" in ev  # all_turns row of method_comparison
    assert "<td>0.100</td>" not in ev  # the turn_2 row is not a headline
    assert "<td>bm25</td><td>multi_turn</td><td>text_only</td><td>3</td><td>0.500</td>" in sec["retrieval"]
    assert "<td>0.900</td>" not in sec["retrieval"]  # by_turns rows left out
    assert "<td>smollm2</td><td>0.600</td>" in sec["intents"]
    assert "<td>smollm2</td><td>clarify</td><td>0.450</td>" in sec["double_turn"]
    assert "<td>log_candidates</td><td>3</td><td>0.667</td>" in sec["logs"]  # both daily partitions
    assert re.search(r"<td>log_candidates</td><td>3</td><td>2</td>", sec["logs"])  # rows per asset: 2 partitions
    assert "<td>loss_curve</td><td>2</td>" in sec["training"]
    assert all(f'href="#group-{g}"' in page for g in sec)  # table of contents
    assert "evaluation/report/report.html" not in page  # no link to a report that is not there


def test_index_is_self_contained_and_links_the_evaluation_report(tmp_path, monkeypatch):
    write_tables(tmp_path / "assets")
    report = tmp_path / "assets/evaluation/report/report.html"
    report.parent.mkdir(parents=True)
    report.write_text("<html></html>")
    page = _report(tmp_path, monkeypatch)
    assert 'href="evaluation/report/report.html"' in _sections(page)["evaluation"]
    refs = re.findall(r'(?:href|src)="([^"]*)"', page)
    assert refs and all(r.startswith("#") or r == "evaluation/report/report.html" for r in refs), refs
    assert "<script" not in page and "http" not in page


def test_nothing_built_still_writes_the_index(tmp_path, monkeypatch):
    sec = _sections(_report(tmp_path, monkeypatch))
    assert list(sec) == list(GROUPS) and all("not materialized" in s for s in sec.values())
