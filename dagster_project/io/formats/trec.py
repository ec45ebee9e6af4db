"""TREC text formats: qrels (`qid iter doc_id rel`) and runs (`qid Q0 doc_id rank score tag`), read line by
line into rows plus a Quarantine (record = 1-based line number), and written back for trec_eval."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import polars as pl

from dagster_project.io.records import InputFileError, Quarantine

RUN_COLUMNS = {"query_id": pl.Utf8, "doc_id": pl.Utf8, "rank": pl.Int64, "score": pl.Float64, "tag": pl.Utf8}


def parse_qrels(lines: Iterable[str], file: str = "qrels",
                quarantine: Quarantine | None = None) -> tuple[list[dict], Quarantine]:
    """TREC qrels lines -> (rows qid, doc_id, rel, source, record; quarantine). Blank and '#' lines are skipped."""
    q = quarantine if quarantine is not None else Quarantine()
    source = Path(file).name
    rows = []
    for n, line in enumerate(lines, start=1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if not_utf8(s):
            q.add(file, n, "not_utf8: the line is not valid UTF-8", raw=s)
            continue
        parts = s.split()
        if len(parts) != 4:
            q.add(file, n, f"expected 4 fields 'qid iter doc_id rel', got {len(parts)}", raw=s)
            continue
        try:
            rel = int(parts[3])
        except ValueError:
            q.add(file, n, f"relevance {parts[3]!r} is not an integer", "rel", s)
            continue
        rows.append({"qid": parts[0], "doc_id": parts[2], "rel": rel, "source": source, "record": n})
    return rows, q


def not_utf8(line: str) -> bool:
    """A line read with surrogateescape that held bytes which are not UTF-8."""
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def read_lines(path: str | Path, key: str | None = None) -> list[str]:
    """The lines of a text file (undecodable bytes kept as surrogate escapes, so the parsers quarantine just
    that line); InputFileError naming the file (and params key) when it cannot be read."""
    p = Path(path)
    if not p.is_file():
        raise InputFileError(p.as_posix(), "file not found", key=key)
    try:
        return p.read_text(encoding="utf-8", errors="surrogateescape").splitlines()
    except OSError as err:
        raise InputFileError(p.as_posix(), f"cannot be read: {type(err).__name__}: {err}", key=key) from None


def parse_trec_run(lines: Iterable[str], file: str = "run") -> tuple[pl.DataFrame, Quarantine]:
    """TREC run lines -> (query_id, doc_id, rank, score, tag) and the quarantined lines with a reason."""
    q = Quarantine()
    rows = []
    for n, line in enumerate(lines, start=1):
        s = line.strip()
        if not s:
            continue
        if not_utf8(s):
            q.add(file, n, "not_utf8: the line is not valid UTF-8", raw=s)
            continue
        parts = s.split()
        if len(parts) != 6:
            q.add(file, n, f"expected 6 fields 'qid Q0 doc rank score tag', got {len(parts)}", raw=s)
            continue
        try:
            rank, score = int(parts[3]), float(parts[4])
        except ValueError:
            q.add(file, n, "rank must be an integer and score a number", "rank", s)
            continue
        rows.append({"query_id": parts[0], "doc_id": parts[2], "rank": rank, "score": score, "tag": parts[5]})
    return pl.DataFrame(rows, schema=RUN_COLUMNS), q


def to_trec_run(runs: pl.DataFrame, tag_col: str = "run_id") -> str:
    """TREC run lines 'qid Q0 doc_id rank score tag'; the score is the rank-derived 1/rank when none is given."""
    lines = []
    for r in runs.sort("query_id", "rank").iter_rows(named=True):
        score = r["score"] if r.get("score") is not None else 1.0 / r["rank"]
        tag = str(r.get(tag_col) or "run").replace(" ", "_")
        lines.append(f"{r['query_id']} Q0 {r['doc_id']} {r['rank']} {score:.6f} {tag}")
    return "\n".join(lines) + ("\n" if lines else "")


def to_trec_qrels(qrels: pl.DataFrame, query_facets: pl.DataFrame) -> str:
    """Qrels keyed by run query id (each query inherits its facet's judgements), for trec_eval on exported runs."""
    joined = query_facets.select("query_id", "facet_id").join(qrels.rename({"qid": "facet_id"}), on="facet_id")
    return "".join(f"{r['query_id']} 0 {r['doc_id']} {r['rel']}\n"
                   for r in joined.sort("query_id", "doc_id").iter_rows(named=True))
