"""Query sets (§4 Data): QA files -> one row per query with its readings y_1..y_k, its use (train / eval,
disjoint) and the queries each use selects.

One *interpretation* (reading) = one expected answer with its aliases and, when the data gives one, the
disambiguated question. A file's items that share a normalised alias are one reading (union-find).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from dagster_project.config import DoubleTurnConfig, DoubleTurnInput
from dagster_project.core.double_turn.metrics import normalize_answer
from dagster_project.core.double_turn.split import USES, assign_use, train_stage
from dagster_project.io.formats.ambigqa import read_ambigqa
from dagster_project.io.formats.clarify_jsonl import read_clarify_jsonl
from dagster_project.io.formats.nq_open import read_nq_open
from dagster_project.io.formats.qa_generic import Item, QARecord, read_generic
from dagster_project.io.records import InputFileError, Quarantine

FORMATS = ("ambigqa", "nq_open", "generic", "clarify_jsonl")

QA_SCHEMA = {
    "query_id": pl.Utf8, "question": pl.Utf8, "answers": pl.List(pl.List(pl.Utf8)),
    "gold_answers": pl.List(pl.Utf8), "gold_set": pl.List(pl.Utf8), "disambiguated_questions": pl.List(pl.Utf8),
    "n_interpretations": pl.Int64, "is_ambiguous": pl.Boolean, "split": pl.Utf8,
    "source_file": pl.Utf8, "format": pl.Utf8, "record": pl.Int64,
    "file_records": pl.Int64, "file_rejected": pl.Int64,
}


@dataclass
class QAFile:
    """One input file after reading: its records, its quarantine, and the use its queries are for."""

    file: str
    format: str
    split: str
    records: list[QARecord]
    quarantine: Quarantine
    n_read: int  # usable + quarantined records, as read (before duplicate ids are quarantined)


def read_qa_file(path: str | Path, fmt: str, split: str = "both", answers_are_aliases: bool = False,
                 key: str | None = None) -> QAFile:
    """Read one QA file in one of FORMATS. Raises InputFileError (naming the params `key`, when given) for a
    file that cannot be used at all."""
    if fmt == "ambigqa":
        records, q = read_ambigqa(path, key=key)
    elif fmt == "nq_open":
        records, q = read_nq_open(path, answers_are_aliases=answers_are_aliases, key=key)
    elif fmt == "generic":
        records, q = read_generic(path, key=key)
    elif fmt == "clarify_jsonl":
        records, q = read_clarify_jsonl(path, key=key)
    else:
        raise InputFileError(path, f"unknown format {fmt!r}; known: {list(FORMATS)}", key=key)
    return QAFile(Path(path).as_posix(), fmt, split, records, q, len(records) + len(q))


def read_inputs(inputs: list[DoubleTurnInput]) -> list[QAFile]:
    """Every file of double_turn.inputs, in order."""
    return [read_qa_file(i.path, i.format, i.split, i.answers_are_aliases, key=f"double_turn.inputs[{n}].path")
            for n, i in enumerate(inputs)]


def merge_interpretations(items: list[Item]) -> list[dict[str, Any]]:
    """Merge (aliases, disambiguated question) items that share a normalised alias (union-find).

    Order follows first appearance; aliases are de-duplicated by normalised form (first spelling kept);
    the first non-empty disambiguated question of a merged group is kept.
    """
    parent = list(range(len(items)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}
    for i, (aliases, _) in enumerate(items):
        for a in aliases:
            key = normalize_answer(a)
            if not key:
                continue
            if key in owner:
                ri, rj = find(i), find(owner[key])
                if ri != rj:
                    parent[max(ri, rj)] = min(ri, rj)
            else:
                owner[key] = i
    groups: dict[int, dict[str, Any]] = {}
    for i, (aliases, question) in enumerate(items):
        g = groups.setdefault(find(i), {"answers": [], "question": None, "_seen": set()})
        for a in aliases:
            a = a.strip()
            key = normalize_answer(a) or a.lower()
            if a and key not in g["_seen"]:
                g["_seen"].add(key)
                g["answers"].append(a)
        if g["question"] is None and question and question.strip():
            g["question"] = question.strip()
    return [{"answers": g["answers"], "question": g["question"]} for g in groups.values() if g["answers"]]


RAW_SET_FORMATS = ("clarify_jsonl", "nq_open")  # one answer string per item, as the paper's answer sets


def gold_set(items: list[Item], interp: list[dict[str, Any]], fmt: str) -> list[str]:
    """The gold answer set the evaluation scores, one string per answer and no aliases. The paper's own files and
    NQ-Open give raw strings: their distinct raw strings, unmerged, as ``set(ex["answers"])`` ("Moscow" and
    "moscow" are two answers). AmbigQA and generic files give alias lists from several annotations: the first
    alias of each merged reading (their readings stand for the paper's one string per interpretation)."""
    if fmt in RAW_SET_FORMATS:
        return list(dict.fromkeys(aliases[0] for aliases, _ in items if aliases))
    return [i["answers"][0] for i in interp]


def qa_tables(files: list[QAFile]) -> tuple[pl.DataFrame, Quarantine]:
    """(qa_sets, its quarantine) from several files; a repeated query id is quarantined too.

    qa_sets carries ``file_records`` and ``file_rejected`` so that kept + rejected == records read can be
    checked per file.
    """
    seen: dict[str, str] = {}
    rows, rejected = [], Quarantine()
    for f in files:
        kept = []
        for r in f.records:
            if r.id in seen:
                f.quarantine.add(r.file, r.record, f"duplicate id (first seen in {seen[r.id]})", "id",
                                 {"id": r.id, "question": r.question})
                continue
            seen[r.id] = r.file
            kept.append(r)
        for r in kept:
            interp = merge_interpretations(r.items)
            rows.append({
                "query_id": r.id, "question": r.question.strip(),
                "answers": [i["answers"] for i in interp], "gold_answers": [i["answers"][0] for i in interp],
                "gold_set": gold_set(r.items, interp, f.format),
                "disambiguated_questions": [i["question"] for i in interp],
                "n_interpretations": len(interp), "is_ambiguous": len(interp) > 1, "split": f.split,
                "source_file": r.file, "format": f.format, "record": r.record,
                "file_records": f.n_read, "file_rejected": len(f.quarantine),
            })
        rejected.rows.extend(f.quarantine.rows)
    return pl.DataFrame(rows, schema=QA_SCHEMA), rejected


def _draw(pool: pl.DataFrame, max_queries: int | None, key: str) -> set[str]:
    """Up to max_queries ids of `pool`, half ambiguous where possible (seeded shuffle per stratum); None: all."""
    if max_queries is None:
        return set(pool["query_id"])
    rng = random.Random(key)
    amb = list(pool.filter(pl.col("is_ambiguous"))["query_id"])
    una = list(pool.filter(~pl.col("is_ambiguous"))["query_id"])
    rng.shuffle(amb)
    rng.shuffle(una)
    n_amb = min(len(amb), max(max_queries - len(una), (max_queries + 1) // 2))
    n_una = min(len(una), max_queries - n_amb)
    return set(amb[:n_amb]) | set(una[:n_una])


def select_queries(qa: pl.DataFrame, max_queries: int | None, seed: int,
                   sft_fraction: float | None = None) -> pl.DataFrame:
    """Add ``selected_train`` / ``selected_eval``: up to max_queries of each use, half ambiguous where possible.

    Each use draws only from its own queries (``use``, see split.assign_use), so the two selections are
    disjoint. Selection is a seeded shuffle within the ambiguous and unambiguous strata, so a small demo
    sees both kinds of question. ``None`` selects every query of the use. With ``sft_fraction`` the training
    queries of each stage (split.train_stage: SFT, DPO) are drawn apart, up to max_queries each.
    """
    out = qa
    for use in USES:
        pool = qa.filter(pl.col("use") == use)
        if use == "train" and sft_fraction is not None:
            stage = pl.Series([train_stage(q, seed, sft_fraction) for q in pool["query_id"]], dtype=pl.Utf8)
            chosen = set().union(*(_draw(pool.filter(stage == s), max_queries, f"{seed}:{use}:{s}")
                                   for s in ("sft", "dpo")))
        else:
            chosen = _draw(pool, max_queries, f"{seed}:{use}")
        out = out.with_columns(pl.col("query_id").is_in(list(chosen)).alias(f"selected_{use}"))
    return out


def import_qa_sets(cfg: DoubleTurnConfig) -> tuple[pl.DataFrame, Quarantine, list[QAFile]]:
    """qa_sets (with the selection of each use), its quarantine, and the files read."""
    files = read_inputs(cfg.inputs)
    qa, rejected = qa_tables(files)
    qa = assign_use(qa, cfg.seed, cfg.eval_fraction)
    return select_queries(qa, cfg.max_queries, cfg.seed, cfg.sft_fraction), rejected, files


def selected(qa: pl.DataFrame, use: str) -> pl.DataFrame:
    """The queries selected for one use (train / eval)."""
    return qa.filter(pl.col(f"selected_{use}"))
