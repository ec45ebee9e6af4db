"""The evaluation report as files: report.md, a self-contained report.html (plots inlined) and the PNGs."""

from __future__ import annotations

import base64
import re

from dagster_project.core.clarifymt.report import ReportInputs, render_report
from dagster_project.core.clarifymt.report_plots import report_plots

_IMG = re.compile(r'src="([\w.-]+\.png)"')


def render_html(markdown_text: str, plots: dict[str, bytes]) -> str:
    """One self-contained page: the Markdown rendered, every plot inlined as a data URI (no network)."""
    import markdown as md

    body = md.markdown(markdown_text, extensions=["tables"])
    body = _IMG.sub(lambda mt: f'src="data:image/png;base64,{base64.b64encode(plots[mt.group(1)]).decode()}"'
                    if mt.group(1) in plots else mt.group(0), body)
    style = ("body{font-family:system-ui,sans-serif;max-width:75em;margin:2em auto;padding:0 1em;color:#222}"
             "table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:.85em}"
             "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}th{background:#f3f3f3}"
             "td:first-child,td:nth-child(2),td:nth-child(3){text-align:left}img{max-width:100%}"
             "h2{border-bottom:1px solid #ddd;margin-top:2em}")
    return ("<!doctype html><html><head><meta charset='utf-8'><title>ClarifyMT-Bench evaluation report</title>"
            f"<style>{style}</style></head><body>{body}</body></html>")


def report_files(inputs: ReportInputs) -> tuple[dict[str, bytes], str]:
    """{file name: content} for report.md, a self-contained report.html and the plots as PNG, and the Markdown
    (the caller writes them: core/ does no file I/O)."""
    plots = report_plots(inputs)
    text = render_report(inputs, list(plots))
    return {"report.md": text.encode(), "report.html": render_html(text, plots).encode(), **plots}, text
