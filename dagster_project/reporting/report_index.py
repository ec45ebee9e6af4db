"""One self-contained HTML index of every group's tables: headline numbers and rows per asset, read from the
built Parquet (never runs anything), so one page shows what a run produced, not only the evaluation report.

A group with no tables under assets/<group>/ gets a section that says "not materialized".
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from dagster_project.defs.registry import GROUPS as REGISTRY
from dagster_project.io.writers import atomic_path
from dagster_project.lib.warehouse import ASSETS_DIR, parquet_files
from dagster_project.reporting.transcripts import transcript_pages

INDEX_FILE = "index.html"
EVALUATION_REPORT = "evaluation/report/report.html"  # relative to the assets folder, like the index itself
MAX_ROWS = 25  # per headline table; the warehouse holds the rest
# every registered group, in pipeline order; folders of other groups found under assets/ follow
GROUPS = tuple(g.name for g in REGISTRY)


@dataclass
class Section:
    group: str
    assets: pl.DataFrame  # asset, rows, partitions, updated (empty: not materialized)
    headlines: list[tuple[str, pl.DataFrame]] = field(default_factory=list)  # (caption, small table)
    links: list[tuple[str, str]] = field(default_factory=list)  # (text, href relative to the index)


def asset_rows(base: str | Path, group: str) -> pl.DataFrame:
    """Rows per table of a group (Parquet footers only): one file per asset, or a folder of partitions."""
    folder = Path(base) / group
    out = []
    for path in sorted(folder.glob("[!.]*")) if folder.is_dir() else []:  # no hidden (temp) file
        files = [path] if path.suffix == ".parquet" else parquet_files(path)
        if not files:
            continue
        out.append({"asset": path.stem if path.is_file() else path.name,
                    "rows": sum(pq.ParquetFile(f).metadata.num_rows for f in files),
                    "partitions": len(files) if path.is_dir() else None,
                    "updated": datetime.fromtimestamp(max(f.stat().st_mtime for f in files), UTC)
                    .strftime("%Y-%m-%d %H:%M UTC")})
    return pl.DataFrame(out, schema={"asset": pl.Utf8, "rows": pl.Int64, "partitions": pl.Int64, "updated": pl.Utf8})


def headlines(base: str | Path, group: str) -> list[tuple[str, pl.DataFrame | None]]:
    """The group's headline tables (its registry entry's), None where that table is not built."""
    return next((g.headlines(Path(base)) for g in REGISTRY if g.name == group), [])


def sections(base: str | Path = ASSETS_DIR) -> list[Section]:
    """One section per known group, then per other group folder under `base` that holds tables."""
    found = sorted(p.name for p in Path(base).iterdir() if p.is_dir()) if Path(base).is_dir() else []
    out = []
    for group in [*GROUPS, *(g for g in found if g not in GROUPS)]:
        rows = asset_rows(base, group)
        if rows.is_empty() and group not in GROUPS:
            continue
        s = Section(group, rows, [(cap, t) for cap, t in headlines(base, group) if t is not None])
        if group == "evaluation" and (Path(base) / EVALUATION_REPORT).exists():
            s.links.append(("full evaluation report (plots, per-persona and per-subtype tables)", EVALUATION_REPORT))
        if group == "evaluation":
            s.links += [(f"transcripts of {p.stem}: every dialogue, turn by turn, with each method's reply",
                         p.relative_to(base).as_posix()) for p in transcript_pages(base)]
        out.append(s)
    return out


def _cell(v: object) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, float):
        return f"{v:.3f}"
    if isinstance(v, list):
        return ", ".join(map(str, v))
    return str(v)


def html_table(df: pl.DataFrame, max_rows: int = MAX_ROWS) -> str:
    """A small escaped HTML table; floats with 3 decimals (shares stay shares); longer tables are cut, and say so."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in df.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in row) + "</tr>"
                   for row in df.head(max_rows).iter_rows())
    more = (f'<p class="note">{df.height - max_rows} more rows: query them with <code>clarify sql</code></p>'
            if df.height > max_rows else "")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{more}"


_CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:70em;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1em;font-size:.9em}th,td{border:1px solid #ccc;padding:.2em .5em;
text-align:left}th{background:#f3f3f3}td{font-variant-numeric:tabular-nums}.missing{color:#a33}
.note{color:#666;font-size:.85em}nav a{margin-right:1em}section{border-top:1px solid #ddd;margin-top:1.5em}"""


def render_index(secs: list[Section], generated: str) -> str:
    """The page: a table of contents, then per group its headline tables, rows per asset and links (no network)."""
    nav = "".join(f'<a href="#group-{s.group}">{html.escape(s.group)}</a>' for s in secs)
    parts = [(f"<!doctype html><html><head><meta charset='utf-8'><title>clarify-pipeline: report index</title>"
              f"<style>{_CSS}</style></head><body><h1>clarify-pipeline: report index</h1>"
              f'<p class="note">Generated {html.escape(generated)} from the Parquet tables under assets/. Every '
              "table is also a DuckDB view: <code>clarify sql \"select * from &lt;group&gt;.&lt;asset&gt;\"</code>.</p>"
              f"<nav>{nav}</nav>")]
    for s in secs:
        parts.append(f'<section id="group-{s.group}"><h2>{html.escape(s.group)}</h2>')
        if s.assets.is_empty():
            parts.append(f'<p class="missing">not materialized (run <code>clarify materialize {s.group}</code> '
                         "or <code>dvc repro</code>)</p></section>")
            continue
        parts.append(f'<p>tables: {s.assets.height}, rows: {s.assets["rows"].sum():,}</p>')
        parts += [f'<p><a href="{html.escape(href)}">{html.escape(text)}</a></p>' for text, href in s.links]
        for caption, table in s.headlines:
            parts.append(f"<h3>{html.escape(caption)}</h3>{html_table(table)}")
        parts.append(f"<h3>rows per asset</h3>{html_table(s.assets, max_rows=200)}</section>")
    return "".join(parts) + "</body></html>\n"


def write_index(base: str | Path = ASSETS_DIR) -> Path:
    """Write <base>/index.html atomically and return its path."""
    path = Path(base) / INDEX_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    page = render_index(sections(base), datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"))
    with atomic_path(path, ".html") as tmp:
        tmp.write_text(page, encoding="utf-8")
    return path
