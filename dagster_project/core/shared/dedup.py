"""Exact + semantic deduplication (ClarifyMT-Bench §4.1, ClariLM): cluster by cosine > tau, keep the best.

Pairs above tau come from an exact blocked all-pairs search up to `exact_max` rows, and above it from an
approximate nearest-neighbour index (faiss IVF-flat) whose candidates are verified with exact cosines.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from dagster_project.config.dedup import DedupSearch

if TYPE_CHECKING:
    import faiss

Embed = Callable[[list[str]], np.ndarray]


@dataclass
class DedupResult:
    """Per input row: its cluster, whether it was kept, and which row replaced it (with the similarity)."""

    table: pl.DataFrame  # columns: row, cluster, kept, duplicate_of, similarity, dedup_reason
    search: dict[str, int | str]  # how the similar pairs were found: Pairs.summary()

    def summary(self) -> dict[str, int | str]:
        kept = int(self.table["kept"].sum())
        return {"dedup_input": self.table.height, "dedup_kept": kept, "dedup_removed": self.table.height - kept,
                "dedup_clusters": self.table["cluster"].n_unique(), **self.search}


NO_SEARCH: dict[str, int | str] = {"dedup_method": "none", "dedup_candidates": 0, "dedup_verified_pairs": 0}


def merge_searches(searches: Sequence[dict[str, int | str]]) -> dict[str, int | str]:
    """Several dedup runs' search summaries as one (per-question dedup): methods joined, counts summed."""
    methods = sorted({str(s["dedup_method"]) for s in searches} - {"none"})
    return {"dedup_method": "+".join(methods) or "none",
            "dedup_candidates": sum(int(s["dedup_candidates"]) for s in searches),
            "dedup_verified_pairs": sum(int(s["dedup_verified_pairs"]) for s in searches)}


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


ANN_SLACK = 1e-4  # candidates within this much below tau are verified too (faiss sums in another order)
VERIFY_CHUNK = 32_768  # candidate pairs (or query rows) handled at once: O(chunk x dim) floats


@dataclass(frozen=True)
class AnnSearch:
    """When and how the approximate search runs (params.yaml dedup_exact_max / dedup_ann_k / dedup_ann_nprobe)."""

    exact_max: int = 50_000  # up to this many unique texts the exact all-pairs search runs
    k: int = 16  # neighbours searched per row (widened for rows whose k-th neighbour is still a duplicate)
    nprobe: int = 16  # IVF cells searched per row: more finds more pairs, linearly slower


DEFAULT_ANN = AnnSearch()


def ann_search(cfg: DedupSearch) -> AnnSearch:
    """The search knobs of a params section that dedups (config.dedup.DedupSearch)."""
    return AnnSearch(cfg.dedup_exact_max, cfg.dedup_ann_k, cfg.dedup_ann_nprobe)


@dataclass(frozen=True)
class Pairs:
    """Row pairs i < j with cosine > tau, and how they were found."""

    i: np.ndarray
    j: np.ndarray
    sim: np.ndarray
    method: str  # "exact": blocked all pairs; "ann": k nearest neighbours from an IVF index, verified exactly
    candidates: int  # pairs whose cosine was computed exactly

    def summary(self) -> dict[str, int | str]:
        return {"dedup_method": self.method, "dedup_candidates": self.candidates, "dedup_verified_pairs": len(self.i)}


def find_pairs(vectors: np.ndarray, tau: float, block: int, ann: AnnSearch) -> Pairs:
    """Exact search up to `ann.exact_max` rows (O(n^2), no misses), the ANN search above it (about O(n^1.5))."""
    n = len(vectors)
    if n <= ann.exact_max:
        i, j, s = similar_pairs(vectors, tau, block)
        return Pairs(i, j, s, "exact", n * (n - 1) // 2)
    return ann_pairs(vectors, tau, ann.k, ann.nprobe)


def ann_pairs(vectors: np.ndarray, tau: float, k: int, nprobe: int, seed: int = 0) -> Pairs:
    """Pairs with cosine > tau among each row's k nearest neighbours, verified with exact cosines.

    faiss IVF-flat: k-means cells (4 sqrt(n) of them), each row searched in its `nprobe` nearest cells. A row
    whose k-th neighbour still passes is searched again with twice the count until one fails, so a duplicate
    group larger than k yields all its pairs. Zero vectors have no neighbours (cosine 0).
    """
    v = np.ascontiguousarray(vectors, dtype=np.float32)
    n = len(v)
    norms = np.linalg.norm(v, axis=1) if n else np.zeros(0, np.float32)
    live = np.flatnonzero(norms > 0)
    if len(live) < 2:
        return Pairs(np.array([], int), np.array([], int), np.array([], np.float32), "ann", 0)
    index = _ivf_index(v, norms, live, nprobe, seed)
    found, todo, count = [], live, k + 1  # +1: a row finds itself
    while len(todo):
        codes, saturated = _neighbours(index, v, norms, todo, min(count, len(live)), tau - ANN_SLACK)
        found.append(codes)
        todo = saturated if count < len(live) else saturated[:0]
        count *= 2
    codes = np.unique(np.concatenate(found))
    a, b = np.divmod(codes, n)
    sims = _row_cosines(v, a, b, norms)
    keep = sims > tau
    return Pairs(a[keep], b[keep], sims[keep].astype(np.float32), "ann", len(codes))


def _ivf_index(v: np.ndarray, norms: np.ndarray, live: np.ndarray, nprobe: int, seed: int) -> faiss.IndexIVFFlat:
    """faiss IndexIVFFlat (inner product) over the unit-length live rows, trained on a seeded sample, added in
    chunks so no full normalised copy of the input exists besides the index's own."""
    import faiss  # imported here: only inputs above exact_max pay for loading it

    d, cells = v.shape[1], max(1, min(len(live) // 39, round(4 * np.sqrt(len(live)))))
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, cells, faiss.METRIC_INNER_PRODUCT)
    index.cp.niter, index.cp.seed = 10, seed
    sample = np.sort(np.random.default_rng(seed).permutation(live)[:40 * cells])
    index.train(v[sample] / norms[sample, None])
    for c in range(0, len(live), VERIFY_CHUNK):
        rows = live[c:c + VERIFY_CHUNK]
        index.add_with_ids(v[rows] / norms[rows, None], rows.astype(np.int64))
    index.nprobe = min(nprobe, cells)
    return index


def _neighbours(index: faiss.IndexIVFFlat, v: np.ndarray, norms: np.ndarray, rows: np.ndarray, count: int,
                floor: float) -> tuple[np.ndarray, np.ndarray]:
    """Candidate pairs (coded lo * n + hi) of `rows` above `floor`, and the rows whose last neighbour passed."""
    n, codes, saturated = len(v), [], []
    for start in range(0, len(rows), VERIFY_CHUNK):
        q = rows[start:start + VERIFY_CHUNK]
        sims, keys = index.search(v[q] / norms[q, None], count)  # missing neighbours: key -1, similarity -inf
        ok = (sims > floor) & (keys >= 0)
        saturated.append(q[ok[:, -1]])
        ok &= keys != q[:, None]
        a, b = np.broadcast_to(q[:, None], keys.shape)[ok], keys[ok]
        codes.append(np.minimum(a, b) * n + np.maximum(a, b))
    return np.concatenate(codes), np.concatenate(saturated)


def _clusters(n: int, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    graph = coo_matrix((np.ones(len(i)), (i, j)), shape=(n, n))
    return connected_components(graph, directed=False)[1]


def _resolve(labels: np.ndarray, quality: np.ndarray) -> np.ndarray:
    """Representative row per cluster (labels 0..m-1): highest quality, earliest row on ties."""
    order = np.lexsort((np.arange(len(labels)), -quality, labels))
    first = np.r_[True, labels[order][1:] != labels[order][:-1]] if len(labels) else np.zeros(0, bool)
    return order[first][labels]


def _row_cosines(v: np.ndarray, a: np.ndarray, b: np.ndarray, norms: np.ndarray) -> np.ndarray:
    """cos(v[a[k]], v[b[k]]) for each k, in chunks so memory stays O(chunk x dim)."""
    dots = [np.einsum("ij,ij->i", v[a[c:c + VERIFY_CHUNK]], v[b[c:c + VERIFY_CHUNK]])
            for c in range(0, len(a), VERIFY_CHUNK)]
    return (np.concatenate(dots) if dots else np.zeros(0, v.dtype)) / (norms[a] * norms[b])


def semantic_dedup(texts: Sequence[str], quality: Sequence[float], embed: Embed, tau: float = 0.7,
                   block: int = 2048, ann: AnnSearch = DEFAULT_ANN) -> DedupResult:
    """Exact dedup on normalised text, then connected components of cosine > tau; keep max quality.

    Rows removed keep a pointer to their representative and why (exact / semantic), so nothing is lost.
    Above `ann.exact_max` unique texts the pairs come from the ANN search (`find_pairs`); `search` says which.
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
    search = dict(NO_SEARCH)
    if len(uniques) > 1:
        vecs = np.asarray(embed([texts[k] for k in uniques]))
        pairs = find_pairs(vecs, tau, block, ann)
        search = pairs.summary()
        sem_rep = uniques[_resolve(_clusters(len(uniques), pairs.i, pairs.j), q[uniques])]
        pos = np.searchsorted(uniques, exact_rep)
        rep = sem_rep[pos]
        merged = np.flatnonzero(rep != exact_rep)  # merged semantically (possibly after an exact merge)
        reason[merged] = "semantic"
        norms = np.maximum(np.linalg.norm(vecs, axis=1), 1e-12)
        sim_to_rep[merged] = _row_cosines(vecs, pos[merged], np.searchsorted(uniques, rep[merged]), norms)
    kept = rep == np.arange(n)
    table = pl.DataFrame({
        "row": np.arange(n),
        "cluster": rep,
        "kept": kept,
        "duplicate_of": np.where(kept, -1, rep),
        "similarity": np.where(kept, np.nan, sim_to_rep),
        "dedup_reason": [r or None for r in reason],
    }, schema_overrides={"dedup_reason": pl.Utf8})
    return DedupResult(table, search)
