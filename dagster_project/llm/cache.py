"""Content-addressed LLM response cache in SQLite (WAL): safe for concurrent processes, survives kills."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tenacity import retry, retry_if_exception, stop_after_delay, wait_exponential

from dagster_project.llm.identity import KEY_VERSION

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    text TEXT NOT NULL,
    tokens_in INTEGER NOT NULL,
    tokens_out INTEGER NOT NULL,
    created REAL NOT NULL,
    truncated INTEGER NOT NULL DEFAULT 0,
    key_version INTEGER NOT NULL DEFAULT 1
)
"""

# Keys a run is generating right now: other runs wait for these replies instead of paying again.
# A claim expires unless its owner renews it, so a killed owner's keys are taken over.
_CLAIMS_SCHEMA = """
CREATE TABLE IF NOT EXISTS claims (
    key TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    expires REAL NOT NULL
)
"""

# One row per LLMClient.chat() call: what `clarify doctor` totals per role (hit rate, calls, tokens).
_USAGE_SCHEMA = """
CREATE TABLE IF NOT EXISTS usage (
    ts REAL NOT NULL,
    role TEXT NOT NULL,
    backend TEXT NOT NULL,
    model TEXT NOT NULL,
    requests INTEGER NOT NULL,
    samples INTEGER NOT NULL,
    cache_hits INTEGER NOT NULL,
    errors INTEGER NOT NULL,
    new_tokens_in INTEGER NOT NULL,
    new_tokens_out INTEGER NOT NULL
)
"""


def _locked(err: BaseException) -> bool:
    return isinstance(err, sqlite3.OperationalError) and "locked" in str(err)


@retry(retry=retry_if_exception(_locked), wait=wait_exponential(multiplier=0.02, max=1), stop=stop_after_delay(60),
       reraise=True)
def _use_wal(con: sqlite3.Connection) -> None:
    """Switch a file to WAL once. The switch needs the file to itself and SQLite answers "database is locked"
    at once (no busy wait) while another process opens or switches it: two runs starting together retry."""
    if con.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
        con.execute("PRAGMA journal_mode=WAL")


def _add_column(con: sqlite3.Connection, column: str) -> None:
    """Migrate an older cache; another run migrating it at the same moment is not an error."""
    try:
        con.execute(f"ALTER TABLE responses ADD COLUMN {column}")
    except sqlite3.OperationalError as err:
        if "duplicate column" not in str(err):
            raise


class LLMCache:
    """One row per (request, sample index) key. Only successful replies are stored; errors are retried.

    key_version: rows written before the endpoint entered the key (llm/identity.py) are 1 and are never
    matched by the new keys; `DELETE FROM responses WHERE key_version = 1` reclaims their space."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        with self._conn() as con:
            con.execute(_SCHEMA)
            con.execute(_USAGE_SCHEMA)
            con.execute(_CLAIMS_SCHEMA)
            columns = {row[1] for row in con.execute("PRAGMA table_info(responses)")}
            if "truncated" not in columns:  # a cache written before replies carried their finish reason
                _add_column(con, "truncated INTEGER NOT NULL DEFAULT 0")
            if "key_version" not in columns:  # a cache written before the endpoint entered the key
                _add_column(con, "key_version INTEGER NOT NULL DEFAULT 1")

    def _conn(self) -> sqlite3.Connection:
        con = getattr(self._local, "con", None)
        if con is None:
            con = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            con.execute("PRAGMA busy_timeout=60000")
            _use_wal(con)
            con.execute("PRAGMA synchronous=NORMAL")
            self._local.con = con
        return con

    def get_many(self, keys: list[str]) -> dict[str, tuple[str, int, int]]:
        """key -> (text, tokens_in, tokens_out, truncated) for the keys that are cached."""
        out: dict[str, tuple[str, int, int, bool]] = {}
        con = self._conn()
        for start in range(0, len(keys), 500):
            chunk = keys[start:start + 500]
            q = (f"SELECT key, text, tokens_in, tokens_out, truncated FROM responses "
                 f"WHERE key IN ({','.join('?' * len(chunk))})")
            for key, text, tin, tout, truncated in con.execute(q, chunk):
                out[key] = (text, tin, tout, bool(truncated))
        return out

    def put_many(self, rows: list[tuple[str, str, str, int, int] | tuple[str, str, str, int, int, bool]]) -> None:
        """Insert (key, model, text, tokens_in, tokens_out[, truncated]) rows in one transaction; their
        claims end with it."""
        if not rows:
            return
        now = time.time()
        with self._transaction() as con:
            con.executemany("INSERT OR REPLACE INTO responses (key, model, text, tokens_in, tokens_out, created, "
                            "truncated, key_version) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                            [(*r[:5], now, int(bool(r[5]) if len(r) > 5 else 0), KEY_VERSION) for r in rows])
            con.executemany("DELETE FROM claims WHERE key = ?", [(r[0],) for r in rows])

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        con = self._conn()
        con.execute("BEGIN IMMEDIATE")
        try:
            yield con
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise

    def claim(self, keys: list[str], owner: str, lease_s: float) -> set[str]:
        """Claim the keys that are neither answered nor held by a live claim of another owner (an expired
        claim is taken over); returns the keys `owner` now holds, for lease_s seconds unless renewed."""
        if not keys:
            return set()
        now = time.time()
        with self._transaction() as con:
            answered = set(self._present(con, "responses", keys))
            con.executemany(
                "INSERT INTO claims (key, owner, expires) VALUES (?, ?, ?) ON CONFLICT(key) DO UPDATE SET "
                "owner = excluded.owner, expires = excluded.expires "
                "WHERE claims.expires < ? OR claims.owner = excluded.owner",
                [(k, owner, now + lease_s, now) for k in keys if k not in answered])
            return set(self._present(con, "claims", keys, owner))

    def renew(self, owner: str, lease_s: float) -> None:
        """Extend every claim of `owner` (the heartbeat of a run that is still generating)."""
        self._conn().execute("UPDATE claims SET expires = ? WHERE owner = ?", (time.time() + lease_s, owner))

    def release(self, owner: str) -> None:
        """Drop the owner's remaining claims (keys that failed: another run may try them)."""
        self._conn().execute("DELETE FROM claims WHERE owner = ?", (owner,))

    @staticmethod
    def _present(con: sqlite3.Connection, table: str, keys: list[str], owner: str | None = None) -> list[str]:
        found: list[str] = []
        for start in range(0, len(keys), 500):
            chunk = keys[start:start + 500]
            q = f"SELECT key FROM {table} WHERE key IN ({','.join('?' * len(chunk))})"
            args: list[str] = list(chunk)
            if owner is not None:
                q, args = q + " AND owner = ?", [*args, owner]
            found.extend(k for (k,) in con.execute(q, args))
        return found

    def stats(self) -> dict[str, int]:
        n, tin, tout = self._conn().execute(
            "SELECT count(*), coalesce(sum(tokens_in),0), coalesce(sum(tokens_out),0) FROM responses").fetchone()
        return {"entries": n, "tokens_in": tin, "tokens_out": tout}

    def by_model(self) -> list[tuple[str, int, int, int]]:
        return self._conn().execute(
            "SELECT model, count(*), sum(tokens_in), sum(tokens_out) FROM responses GROUP BY 1 ORDER BY 2 DESC"
        ).fetchall()

    def record_usage(self, role: str, backend: str, model: str, requests: int, samples: int, cache_hits: int,
                     errors: int, new_tokens_in: int, new_tokens_out: int) -> None:
        """Append one chat() call's accounting (never the prompts, never a key)."""
        self._conn().execute("INSERT INTO usage VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                             (time.time(), role, backend, model, requests, samples, cache_hits, errors,
                              new_tokens_in, new_tokens_out))

    def usage_by_role(self) -> list[dict[str, object]]:
        """Totals per (role, backend, model): calls, samples, cache hits, new calls, errors, new tokens."""
        rows = self._conn().execute(
            "SELECT role, backend, model, count(*), sum(requests), sum(samples), sum(cache_hits), sum(errors), "
            "sum(new_tokens_in), sum(new_tokens_out) FROM usage GROUP BY 1, 2, 3 ORDER BY 1, 2, 3").fetchall()
        cols = ("role", "backend", "model", "chat_calls", "requests", "samples", "cache_hits", "errors",
                "new_tokens_in", "new_tokens_out")
        return [dict(zip(cols, r)) for r in rows]

    def size_bytes(self) -> int:
        """The database file plus its WAL and shared-memory files."""
        return sum(p.stat().st_size for p in (self.path, Path(f"{self.path}-wal"), Path(f"{self.path}-shm"))
                   if p.exists())
