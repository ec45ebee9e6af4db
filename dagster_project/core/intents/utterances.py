"""Intent-tagged utterances: validation (kept rows + the 5-column quarantine), split assignment, sampling."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import polars as pl

from dagster_project.config import IntentsConfig
from dagster_project.core.intents.catalog import SPLITS, bad_encoding, name_key, normalize_text
from dagster_project.io.formats.intents import as_text, problem_reason
from dagster_project.io.records import Quarantine, Record

UTTERANCE_SCHEMA = {"utterance_id": pl.Utf8, "text": pl.Utf8, "intent": pl.Utf8, "split": pl.Utf8,
                    "is_ood": pl.Boolean, "record": pl.Int64}


def _problem(text: str | None, intent: str | None, split: str | None, known: dict[str, str], ood_label: str,
             seen: dict[str, int]) -> tuple[str, str] | None:
    """(field, reason) that refuses a record, or None."""
    clean = " ".join((text or "").split())
    if not clean:
        return "text", "empty text"
    if bad_encoding(text or ""):
        return "text", "bad encoding (undecodable bytes or control characters in text)"
    if not intent or not intent.strip():
        return "intent", "missing intent"
    if name_key(intent) not in known and name_key(intent) != name_key(ood_label):
        return "intent", f"unknown intent {intent.strip()!r} (not in the catalogue, not {ood_label!r})"
    if split and split.strip() and SPLITS.get(split.strip().casefold()) is None:
        return "split", f"unknown split {split!r} (use train, val or test)"
    if normalize_text(clean) in seen:
        return "text", f"duplicate of record {seen[normalize_text(clean)]}"
    return None


def _assign_splits(kept: list[dict], test_fraction: float, seed: int) -> None:
    """Rows without a split: per intent, a seeded shuffle sends round(test_fraction * n) to test, the rest to train."""
    rng = np.random.default_rng(seed)
    by_intent: dict[str, list[dict]] = defaultdict(list)
    for row in kept:
        if row["split"] is None:
            by_intent[row["intent"]].append(row)
    for name in sorted(by_intent):
        group = by_intent[name]
        n_test = math.floor(test_fraction * len(group) + 0.5)
        for rank, idx in enumerate(rng.permutation(len(group))):
            group[idx]["split"] = "test" if rank < n_test else "train"


def validate_utterances(records: list[Record], source: str, intents: list[str],
                        cfg: IntentsConfig) -> tuple[pl.DataFrame, Quarantine]:
    """(kept, quarantine). Refused: unparseable record, empty text, bad encoding, missing / unknown intent, unknown
    split, duplicate (case- and whitespace-insensitive) of an earlier kept record.

    Rows whose intent is `cfg.ood_label` are kept as out-of-domain test utterances (`is_ood`). Rows without a split
    get one (see `_assign_splits`, with cfg.test_fraction and cfg.seed).
    """
    known = {name_key(n): n for n in intents}
    kept: list[dict] = []
    rejected = Quarantine()
    seen: dict[str, int] = {}
    for rec in records:
        if rec.problem:
            rejected.add_record(rec, problem_reason(rec))
            continue
        text, intent, split = (as_text(rec.data.get(k)) for k in ("text", "intent", "split"))
        refused = _problem(text, intent, split, known, cfg.ood_label, seen)
        if refused:
            rejected.add_record(rec, refused[1], refused[0])
            continue
        clean = " ".join((text or "").split())
        seen[normalize_text(clean)] = rec.record
        is_ood = name_key(intent or "") == name_key(cfg.ood_label)
        kept.append({"utterance_id": f"u{rec.record:05d}", "text": clean,
                     "intent": cfg.ood_label if is_ood else known[name_key(intent or "")],
                     "split": SPLITS.get(split.strip().casefold()) if split and split.strip() else None,
                     "is_ood": is_ood, "record": rec.record})
    _assign_splits(kept, cfg.test_fraction, cfg.seed)
    return pl.DataFrame(kept, schema=UTTERANCE_SCHEMA).with_columns(source=pl.lit(source)), rejected


def round_robin_sample(df: pl.DataFrame, n: int, seed: int, by: str = "intent") -> pl.DataFrame:
    """n rows spread over the `by` groups: groups in a seeded order, each group shuffled, then taken in turns."""
    if n <= 0 or df.is_empty():
        return df.head(0)
    rng = np.random.default_rng(seed)
    groups = {k: g for (k,), g in df.sort("utterance_id").group_by([by], maintain_order=True)}
    keys = sorted(groups)
    keys = [keys[i] for i in rng.permutation(len(keys))]
    queues = {k: [groups[k].row(int(i), named=True) for i in rng.permutation(groups[k].height)] for k in keys}
    picked: list[dict] = []
    while len(picked) < n and any(queues.values()):
        for k in keys:
            if queues[k] and len(picked) < n:
                picked.append(queues[k].pop(0))
    return pl.DataFrame(picked, schema=df.schema)
