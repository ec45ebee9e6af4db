"""Tables for reports: Markdown rendering shared by every group's report."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl


def markdown_table(df: pl.DataFrame, plain: Sequence[str] = ()) -> str:
    """A GitHub-flavoured Markdown table; floats are shares shown as percentages, except ``plain`` columns."""
    if df.is_empty():
        return "_(no rows)_\n"
    cols = df.columns
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in df.iter_rows():
        cells = []
        for c, v in zip(cols, row):
            if v is None or (isinstance(v, float) and v != v):
                cells.append("")
            elif isinstance(v, float):
                cells.append(f"{v:.3g}" if c in plain and 0 < abs(v) < 0.01 else
                             f"{v:.2f}" if c in plain else f"{v * 100:.1f}")
            elif isinstance(v, list):
                cells.append(", ".join(map(str, v)))
            else:
                cells.append(str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
