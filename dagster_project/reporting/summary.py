"""What `clarify summary` prints: by default one screen (rows per group, then one headline table per evaluated
dataset, methods as rows), with `--all` every asset's rows and the whole accuracy table (dataset in every row).

Reads the warehouse views only (never runs anything).
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import polars as pl
from rich import box
from rich.table import Table
from rich.text import Text

SCREEN_LINES = 60  # the default output stays within this many lines (a laptop terminal's screen)
TABLE_OVERHEAD = 3  # title, header, rule of a compact table (box.SIMPLE_HEAD without edges)
# headline columns of the per-dataset tables: (column in the source table, header)
HEADLINE = (("n", "n"), ("accuracy", "acc%"), ("under_clarification", "under%"), ("over_clarification", "over%"),
            ("invalid", "inv%"), ("judge_score", "judge"))
PERCENT = {"accuracy", "under_clarification", "over_clarification", "invalid"}
ACCURACY_COLUMNS = ("dataset", "subject", "method", "persona", "n", "accuracy", "under_clarification",
                    "over_clarification", "invalid")


def _compact(title: str, caption: str | None = None) -> Table:
    """A borderless table: title, header, rule, rows (and the caption line when given); both as text, since
    they hold dataset names from params (a '[red]' in one is not rich markup)."""
    return Table(title=Text(title, style="table.title"), caption=caption and Text(caption, style="table.caption"),
                 box=box.SIMPLE_HEAD, show_edge=False, title_justify="left",
                 caption_justify="left", pad_edge=False, padding=(0, 1), collapse_padding=True)


def _metric(column: str, v: object) -> str:
    """Shares as percentages with one decimal, the judge score with two, counts as they are."""
    if v is None:
        return ""
    if column in PERCENT:
        return f"{v * 100:.1f}"
    return f"{v:.2f}" if isinstance(v, float) else str(v)


def _cell(v: object) -> str:
    return "" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)


def views(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    """(group, asset) of every view in the warehouse, sorted."""
    return [tuple(r) for r in con.sql("select schema_name, view_name from duckdb_views() where not internal "
                                      "order by 1, 2").fetchall()]


def view_rows(con: duckdb.DuckDBPyConnection, group: str, asset: str) -> int | str:
    """Rows of one view, or why it cannot be read (its Parquet is gone)."""
    try:
        return con.execute(f'select count(*) from "{group}"."{asset}"').fetchall()[0][0]
    except duckdb.Error as err:
        return f"unreadable: {type(err).__name__}"


def asset_table(con: duckdb.DuckDBPyConnection) -> Table:
    """Rows per asset (the --all view)."""
    t = Table(title="rows per asset")
    t.add_column("asset")
    t.add_column("rows", justify="right")
    for group, asset in views(con):
        n = view_rows(con, group, asset)
        t.add_row(Text(f"{group}.{asset}"), str(n) if isinstance(n, int) else Text(n, style="red"))
    return t


def group_table(con: duckdb.DuckDBPyConnection) -> Table:
    """Rows per group: tables, total rows, and how many of its views cannot be read."""
    totals: dict[str, list[int]] = {}
    for group, asset in views(con):
        n = view_rows(con, group, asset)
        tally = totals.setdefault(group, [0, 0, 0])
        tally[0] += 1
        if isinstance(n, int):
            tally[1] += n
        else:
            tally[2] += 1
    t = _compact("rows per group")
    for name, justify in (("group", "left"), ("tables", "right"), ("rows", "right"), ("unreadable", "right")):
        t.add_column(name, justify=justify, no_wrap=True)
    for group, (tables, rows, bad) in totals.items():
        t.add_row(Text(group), str(tables), f"{rows:,}", Text(str(bad), style="red") if bad else "")
    return t


def headline_frame(con: duckdb.DuckDBPyConnection) -> pl.DataFrame | None:
    """dataset, subject, method and the headline columns over all turns: evaluation.method_comparison's
    all_turns scope, else metric_tables' overall rows; None when neither is built."""
    names = {f"{g}.{a}" for g, a in views(con)}
    for view, where in (("evaluation.method_comparison", "scope = 'all_turns'"),
                        ("evaluation.metric_tables", "breakdown = 'overall'")):
        if view not in names:
            continue
        try:
            df = con.sql(f"select * from {view} where {where}").pl()
        except duckdb.Error:
            continue
        if "dataset" not in df.columns:
            df = df.with_columns(dataset=pl.lit("(all)"))
        cols = [c for c, _ in HEADLINE if c in df.columns]
        return df.select("dataset", "subject", "method", *cols)
    return None


@dataclass
class DatasetHeadline:
    dataset: str
    rows: pl.DataFrame  # sorted best first


def shown_rows(sizes: list[int], lines: int) -> list[int]:
    """Rows to show per table so that the tables (each TABLE_OVERHEAD lines, plus a caption line when cut)
    fit in `lines`: every table gets the same cap, as large as fits (at least 1 row each)."""
    def used(cap: int) -> int:
        return sum(TABLE_OVERHEAD + min(n, cap) + (n > cap) for n in sizes)

    cap = max(sizes, default=0)
    while cap > 1 and used(cap) > lines:
        cap -= 1
    return [min(n, cap) for n in sizes]


def not_evaluated_lines(rows: pl.DataFrame) -> str | None:
    """The lines naming a dataset's systems without one evaluated turn (every turn an error row, e.g. a model the
    training skipped), instead of rows of empty cells; None when there are none."""
    if "n" not in rows.columns:
        return None
    idle = rows.filter(pl.col("n").fill_null(0) == 0)
    if idle.is_empty():
        return None
    names = ", ".join(f"{r['subject']}/{r['method']}" for r in idle.iter_rows(named=True))
    return f"  no evaluated turns: {names}\n  (every turn an error row; its `error` in evaluation.predictions says why)"


def headline_tables(frame: pl.DataFrame, lines: int, width: int = 80) -> list[Table | Text]:
    """One compact table per dataset (methods as rows, best accuracy first), cut to fit `lines` in all (at `width`
    columns); a cut table's caption says how many rows `--all` adds, and systems with no evaluated turn are
    named in two lines under it instead of as rows."""
    parts = [DatasetHeadline(d, g.sort("accuracy", "subject", "method", descending=[True, False, False],
                                       nulls_last=True))
             for (d,), g in frame.group_by(["dataset"], maintain_order=True)]
    parts.sort(key=lambda p: p.dataset)
    idle = [not_evaluated_lines(p.rows) for p in parts]
    shown = [p.rows.filter(pl.col("n").fill_null(0) > 0) if line else p.rows for p, line in zip(parts, idle)]
    idle_lines = sum(-(-len(part) // max(width, 1)) for line in idle if line for part in line.split("\n"))
    caps = shown_rows([r.height for r in shown], lines - idle_lines)
    headers = dict(HEADLINE)
    out = []
    for part, rows, cap, line in zip(parts, shown, caps, idle, strict=True):
        more = rows.height - cap
        t = _compact(f"{part.dataset}: all turns, % of evaluated turns, best first",
                     f"... {more} more rows (clarify summary --all)" if more else None)
        # names have no spaces: on a narrow terminal they shrink with an ellipsis (one line each), numbers stay whole
        t.add_column("subject", overflow="ellipsis")
        t.add_column("method", overflow="ellipsis")
        metrics = [c for c in rows.columns if c in headers]
        for c in metrics:
            t.add_column(headers[c], justify="right", no_wrap=True)
        for row in rows.head(cap).iter_rows(named=True):
            t.add_row(Text(_cell(row["subject"])), Text(_cell(row["method"])), *(_metric(c, row[c]) for c in metrics))
        out += [t, *([Text(line, style="table.caption")] if line else [])]
    return out


def accuracy_table(con: duckdb.DuckDBPyConnection) -> Table | None:
    """The --all accuracy table: overall and per-persona rows of every dataset x subject x method, in % of evaluated
    turns; the dataset is named whole in every row (on a narrow terminal the other names fold onto a second line)."""
    if ("evaluation", "metric_tables") not in views(con):
        return None
    df = con.sql("select * from evaluation.metric_tables where breakdown in ('overall', 'by_persona')").pl()
    if "dataset" not in df.columns:
        df = df.with_columns(dataset=pl.lit("(all)"))
    df = (df.with_columns(pl.col("persona").fill_null("(all)"))
          .sort("dataset", "subject", "method", "breakdown", "persona", descending=[False, False, False, True, False])
          .select([c for c in ACCURACY_COLUMNS if c in df.columns]))
    headers = dict(HEADLINE)
    t = _compact("accuracy (% of evaluated turns)")
    for c in df.columns:
        if c == "dataset":
            t.add_column(c, no_wrap=True, min_width=max(len(v) for v in df[c].to_list()))
        elif df[c].dtype == pl.Utf8:
            t.add_column(c, overflow="fold")
        else:
            t.add_column(headers.get(c, c), justify="right", no_wrap=True)
    for row in df.iter_rows(named=True):
        t.add_row(*(_metric(c, v) if c in PERCENT or c == "n" else Text(_cell(v)) for c, v in row.items()))
    return t
