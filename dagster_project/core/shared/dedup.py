"""Exact + semantic deduplication (ClarifyMT-Bench §4.1, ClariLM): cluster by cosine > tau, keep the best."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

Embed = Callable[[list[str]], np.ndarray]


@dataclass
class DedupResult:
    """Per input row: its cluster, whether it was kept, and which row replaced it (with the similarity)."""

    table: pl.DataFrame  # columns: row, cluster, kept, duplicate_of, similarity, dedup_reason

    def summary(self) -> dict[str, int]:
        kept = int(self.table["kept"].sum())
        return {"dedup_input": self.table.height, "dedup_kept": kept, "dedup_removed": self.table.height - kept,
                "dedup_clusters": self.table["cluster"].n_unique()}


def normalise(text: str) -> str:
    """Lower-case, collapse whitespace, drop punctuation: the key for exact dedup."""
    return re.sub(r"\s+", " ", re.sub(r"[^\w\s]", " ", text.lower())).strip()


def similar_pairs(vectors: np.ndarray, tau: float, block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All pairs i<j with cosine > tau, computed block by block so memory is O(block x n), not O(n^2)."""
    v = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    v = v / np.where(norms == 0, 1, norms)
    rows, cols, sims = [], [], []
    for start in range(0, len(v), block):
        s = v[start:start + block] @ v[start:].T  # only the upper triangle's columns
        i, j = np.nonzero(s > tau)
        keep = (j + start) > (i + start)
        i, j = i[keep] + start, j[keep] + start
        rows.append(i)
        cols.append(j)
        sims.append(s[i - start, j - start])
    if not rows:
        return np.array([], int), np.array([], int), np.array([], np.float32)
    return np.concatenate(rows), np.concatenate(cols), np.concatenate(sims)


def _clusters(n: int, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    graph = coo_matrix((np.ones(len(i)), (i, j)), shape=(n, n))
    return connected_components(graph, directed=False)[1]


def _resolve(labels: np.ndarray, quality: np.ndarray) -> np.ndarray:
    """Representative row per cluster: highest quality, earliest row on ties."""
    order = np.lexsort((np.arange(len(labels)), -quality, labels))
    rep = np.empty(labels.max() + 1 if len(labels) else 0, dtype=int)
    seen = np.zeros_like(rep, dtype=bool)
    for idx in order:
        c = labels[idx]
        if not seen[c]:
            rep[c], seen[c] = idx, True
    return rep[labels]


def semantic_dedup(texts: Sequence[str], quality: Sequence[float], embed: Embed, tau: float = 0.7,
                   block: int = 2048) -> DedupResult:
    """Exact dedup on normalised text, then connected components of cosine > tau; keep max quality.

    Rows removed keep a pointer to their representative and why (exact / semantic), so nothing is lost.
    """
    n = len(texts)
    q = np.nan_to_num(np.asarray(quality, dtype=float), nan=-np.inf)
    exact_labels = pl.Series([normalise(t) for t in texts]).rank("dense").to_numpy().astype(int) - 1 \
        if n else np.array([], int)
    exact_rep = _resolve(exact_labels, q) if n else np.array([], int)
    uniques = np.unique(exact_rep)
    sim_to_rep = np.ones(n, dtype=np.float32)
    reason = np.where(exact_rep != np.arange(n), "exact", "").astype(object)
    rep = exact_rep.copy()
    if len(uniques) > 1:
        vecs = embed([texts[k] for k in uniques])
        i, j, s = similar_pairs(vecs, tau, block)
        labels = _clusters(len(uniques), i, j)
        sem_rep = uniques[_resolve(labels, q[uniques])]
        final = dict(zip(uniques.tolist(), sem_rep.tolist()))
        rep = np.array([final[r] for r in exact_rep])
        norm = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
        pos = {u: k for k, u in enumerate(uniques.tolist())}
        for k in range(n):
            if rep[k] != exact_rep[k]:  # merged semantically (possibly after an exact merge)
                reason[k] = "semantic"
                sim_to_rep[k] = float(norm[pos[exact_rep[k]]] @ norm[pos[rep[k]]])
    kept = rep == np.arange(n)
    table = pl.DataFrame({
        "row": np.arange(n),
        "cluster": rep,
        "kept": kept,
        "duplicate_of": np.where(kept, -1, rep),
        "similarity": np.where(kept, np.nan, sim_to_rep),
        "dedup_reason": [r or None for r in reason],
    }, schema_overrides={"dedup_reason": pl.Utf8})
    return DedupResult(table)
