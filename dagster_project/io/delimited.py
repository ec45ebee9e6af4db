"""CSV / TSV text -> a header and rows, where one broken row costs that row only.

TSV is read line by line: tabs split cells and a quote is a character, so a stray `"` costs nothing (a cell wholly
wrapped in quotes whose inner quotes are all doubled, as Python's csv, pandas and polars write a cell holding a
quote, is unwrapped). Quoting is detected for one case only: a cell that opens a quote closing on a later line (how
those writers store a line break) is read across lines when the lines form one well-formed row (as for CSV below)
with the header's cell count; otherwise its first line is a row of its own, quote and all.

CSV keeps the csv module's quoting (a quoted cell may hold commas, quotes and line breaks), with one guard for a
row that spans lines: it must be well-formed CSV (its quoted cell closes, and the closing quote is followed by a
comma or the line's end) and its cells must fit the limit. Otherwise a stray quote on its first line opened a
cell that swallowed what follows (it ends at the next quote in the file, which is almost never followed by a
comma, or at the end of the file): that first line alone is a broken row and reading resumes on the next line.
A well-formed row that spans lines with the wrong cell count is one ragged row; a last line whose quoted cell
never closes is a broken row. A cell longer than `limit` (the csv module's field limit is raised to it) makes
its row an oversized one, naming the cell. Single-line rows keep the csv module's lenient reading (`5" screen`).
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO


@dataclass(frozen=True)
class Row:
    """One row: its cells ([] for a blank line), or None with the problem that kept it from being read."""

    cells: list[str] | None
    raw: str
    problem: str | None = None  # ragged_row | unbalanced_quote | oversized_field
    detail: str | None = None
    cell: int | None = None  # 0-based index of the cell the problem is in, when known


class _Lines:
    """Physical lines with push-back; remembers the lines handed out since the last `take`."""

    def __init__(self, f: IO[str]):
        self._it, self._back, self._taken = iter(f), [], []

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        line = self._back.pop() if self._back else next(self._it)
        self._taken.append(line)
        return line

    def take(self) -> list[str]:
        out, self._taken = self._taken, []
        return out

    def push_back(self, lines: list[str]) -> None:
        self._back.extend(reversed(lines))


def unquote(cell: str) -> str:
    """A TSV cell wrapped in quotes by a csv writer (inner quotes doubled) -> its text; other cells as they are."""
    if len(cell) >= 2 and cell[0] == cell[-1] == '"' and '"' not in cell[1:-1].replace('""', ""):
        return cell[1:-1].replace('""', '"')
    return cell


def _tsv_cells(line: str) -> list[str]:
    body = line.rstrip("\r\n")
    return [unquote(c) for c in body.split("\t")] if body else []


def _strict_error(lines: list[str], delimiter: str) -> str | None:
    """Why `lines` (one row as the csv module split it) is not strictly well-formed CSV, None when it is: a quoted
    cell must close, and its closing quote must be followed by the delimiter or the line's end."""
    try:
        list(csv.reader(lines, delimiter=delimiter, strict=True))
    except csv.Error as e:
        return str(e)
    return None


def long_cell(text: str, delimiter: str, limit: int) -> int | None:
    """0-based index of the first cell of `text` longer than `limit` characters (csv quoting), None if none is."""
    index = length = i = 0
    quoted, start = False, True
    while i < len(text):
        ch = text[i]
        if quoted and ch == '"':
            if text[i + 1:i + 2] == '"':  # a doubled quote: one character of the cell
                length, i = length + 1, i + 1
            else:
                quoted = False
        elif quoted or (ch not in '\r\n"' and ch != delimiter) or (ch == '"' and not start):
            length += 1
        elif ch == '"':
            quoted = True
        elif ch == delimiter:
            index, length = index + 1, 0
        start = ch == delimiter
        if length > limit:
            return index
        i += 1
    return None


def _line_row(line: str, n_cells: int) -> Row:
    """One TSV line as a row: tabs split cells, quotes are characters (a writer's wrapping quotes removed)."""
    cells = _tsv_cells(line)
    if cells and len(cells) != n_cells:
        return Row(None, line, "ragged_row", f"expected {n_cells} fields, got {len(cells)}")
    return Row(cells, line)


def _rows(lines: _Lines, delimiter: str, n_cells: int, limit: int) -> Iterator[Row]:
    tsv = delimiter == "\t"
    reader = csv.reader(lines, delimiter=delimiter)
    while True:
        try:
            cells, error = next(reader), None
        except StopIteration:
            return
        except csv.Error as e:
            cells, error = None, e
        if cells and any(len(c) > limit for c in cells):  # the csv limit may be higher (raised by another read)
            cells, error = None, csv.Error(f"field larger than field limit ({limit})")
        taken = lines.take()
        raw = "".join(taken)
        if tsv and len(taken) == 1:
            yield _line_row(raw, n_cells)
            continue
        strict = _strict_error(taken, delimiter) if error is None and (len(taken) > 1 or raw.count('"') % 2) else None
        if len(taken) > 1 and (error is not None or strict is not None or (tsv and len(cells) != n_cells)):
            lines.push_back(taken[1:])
            if tsv:  # the quote is a character of the line, which is a row of its own
                yield _line_row(taken[0], n_cells)
                continue
            over = long_cell(raw, delimiter, limit) if error is not None else None
            detail = f"a quoted cell opened on this line ran over the {len(taken) - 1} line(s) after it: {error or strict}"
            yield Row(None, taken[0], "oversized_field" if over is not None else "unbalanced_quote", detail, over)
            continue
        if strict is not None and "unexpected end of data" in strict:
            yield Row(None, raw, "unbalanced_quote", "a quoted cell opened on this line never closes")
            continue
        if error is not None:
            over = long_cell(raw, delimiter, limit)
            yield Row(None, raw, "oversized_field" if over is not None else "unreadable_row", str(error), over)
        elif cells and len(cells) != n_cells:
            yield Row(None, raw, "ragged_row", f"expected {n_cells} fields, got {len(cells)}")
        else:
            yield Row(cells, raw)


def read_table(f: IO[str], tsv: bool, limit: int) -> tuple[list[str] | None, Iterator[Row]]:
    """(header, rows after it) of CSV / TSV text `f` (opened with newline=""); the header is the first non-blank
    row, None for a file without one. `limit`: the longest CSV cell read (the csv module's field limit is raised
    to it); a longer one makes its row a broken one. Rows are split the same way whatever the caller's own text
    limit, so a record count agrees with every reader."""
    lines = _Lines(f)
    csv.field_size_limit(max(csv.field_size_limit(), limit))  # process-wide: only ever raised
    if tsv:
        header = next((cells for line in lines if (cells := _tsv_cells(line))), None)
    else:
        header = next((cells for cells in csv.reader(lines) if cells), None)
    lines.take()
    return header, _rows(lines, "\t" if tsv else ",", len(header or ()), limit)
