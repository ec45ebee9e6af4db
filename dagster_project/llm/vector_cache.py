"""Content-addressed cache of numeric model outputs (sentence embeddings, BERTScore-F1) in SQLite (WAL).

MiniLM was the largest cost of a warm paper-scale rerun (Intent-Sim encodings, BERTScore, dedup): with every LLM
reply cached, a rerun still encoded every text again. Keyed by sha256(namespace, text), where the namespace names
the model and its settings; safe for concurrent processes (WAL, busy timeout), and a killed run keeps what it stored.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Sequence
from contextlib import closing
from pathlib import Path

import numpy as np

_SCHEMA = "CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, value BLOB NOT NULL)"
_CHUNK = 900  # keys per IN (...) query, under SQLite's variable limit


def _key(namespace: str, text: str) -> str:
    return hashlib.sha256(f"{namespace}\x00{text}".encode()).hexdigest()


class VectorCache:
    """float32 rows by key in one SQLite file (opened per call, so the resource pickles and forks cleanly)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(self.path, timeout=60)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute(_SCHEMA)
        return con

    def rows(self, namespace: str, texts: Sequence[str], compute: Callable[[list[str]], np.ndarray]) -> np.ndarray:
        """One float32 row per text: stored rows where present, compute(distinct missing texts) for the rest."""
        keys = [_key(namespace, t) for t in texts]
        with closing(self._connect()) as con:
            found: dict[str, bytes] = {}
            distinct = list(dict.fromkeys(keys))
            for i in range(0, len(distinct), _CHUNK):
                chunk = distinct[i:i + _CHUNK]
                found |= dict(con.execute(f"SELECT key, value FROM vectors WHERE key IN ({','.join('?' * len(chunk))})",
                                          chunk).fetchall())
            missing = list(dict.fromkeys(t for t, k in zip(texts, keys) if k not in found))
            if missing:
                new = np.asarray(compute(missing), dtype=np.float32).reshape(len(missing), -1)
                stored = {_key(namespace, t): row.tobytes() for t, row in zip(missing, new)}
                with con:
                    con.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?)", stored.items())
                found |= stored
        if not keys:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([np.frombuffer(found[k], dtype=np.float32) for k in keys])
