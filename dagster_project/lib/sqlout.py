"""How `clarify sql` and `clarify summary` print a query result: a rich table, CSV, JSON, NDJSON or Markdown."""

from __future__ import annotations

import json
import sys

import polars as pl
from rich.console import Console
from rich.table import Table
from rich.text import Text

console = Console()


def print_frame(df: pl.DataFrame) -> None:
    """A rich table, floats with 3 decimals; names and values as text (a value '[/bold]' is not rich markup)."""
    table = Table(show_lines=False)
    for c in df.columns:
        table.add_column(Text(c))
    for row in df.iter_rows():
        table.add_row(*[Text(f"{v:.3f}" if isinstance(v, float) else str(v)) for v in row])
    console.print(table)


def flat(df: pl.DataFrame) -> pl.DataFrame:
    """Nested columns (lists, structs) as JSON text: CSV holds only flat values."""
    nested = [c for c, t in df.schema.items() if t.is_nested()]
    return df.with_columns(pl.Series(c, [None if v is None else json.dumps(v, default=str) for v in df[c].to_list()],
                                     dtype=pl.String) for c in nested)


SQL_FORMATS = ("table", "csv", "json", "ndjson", "markdown")


def print_result(df: pl.DataFrame, fmt: str, max_columns: int, vertical: bool) -> None:
    """``df`` in one of SQL_FORMATS; table and markdown show at most ``max_columns`` columns (0: all) unless
    ``vertical`` prints each row as 'column: value' lines, which suits wide rows."""
    if fmt == "csv":
        sys.stdout.write(flat(df).write_csv())
    elif fmt == "json":
        sys.stdout.write(df.write_json() + "\n")
    elif fmt == "ndjson":
        sys.stdout.write(df.write_ndjson())
    elif vertical:
        width = max((len(c) for c in df.columns), default=0)
        for i, row in enumerate(df.iter_rows(named=True)):
            print(f"-- row {i + 1} --")
            for col, value in row.items():
                print(f"{col.rjust(width)}: {value}")
    else:
        shown = df.columns[:max_columns] if max_columns else df.columns
        if fmt == "markdown":
            with pl.Config(tbl_formatting="MARKDOWN", tbl_hide_column_data_types=True, tbl_hide_dataframe_shape=True,
                           tbl_rows=-1, tbl_cols=-1, fmt_str_lengths=10_000, tbl_width_chars=65_535):
                cells = flat(df.select(shown))  # one line per row: escape the column bar, newlines as <br>
                print(cells.with_columns(pl.col(pl.String).str.replace_all("|", "\\|", literal=True)
                                         .str.replace_all(r"\r?\n", "<br>")))
        else:
            print_frame(df.select(shown))
        if hidden := df.columns[len(shown):]:
            print(f"({len(hidden)} more columns not shown: {', '.join(hidden)}; use --vertical or --max-columns 0)")
