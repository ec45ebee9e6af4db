"""Benchmark: retrieval group at scale. (a) session synthesis: streamed combinations + reservoir sampling over
~100k and ~1M two-turn conversations (time per 1k combinations, peak memory); (b) BM25 (bm25s) index build and
query throughput over synthetic collections of 100k and 1M documents."""

from __future__ import annotations

import gc
import math
import random
import tracemalloc

import numpy as np
from _common import BenchResult, ratio, say, timer

from dagster_project.core.retrieval.rankers import BM25Index
from dagster_project.core.retrieval.sessions import (
    count_combinations,
    iter_combinations,
    reservoir_sample,
)

QA_PER_FACET = 46          # C(46, 2) = 1,035 two-turn sessions per facet
SAMPLE = 10_000            # the paper's per-length sample size


def pools(n_facets: int) -> list[tuple[str, list[str]]]:
    return [(f"F{f:05d}", [f"F{f:05d}/Q{q:03d}" for q in range(QA_PER_FACET)]) for f in range(n_facets)]


def _synthesis(n_facets: int, length: int) -> tuple[int, float, int]:
    """(combinations, seconds to stream + sample, peak traced bytes) for one pool set."""
    p = pools(n_facets)
    total = count_combinations(p, length)
    gc.collect()
    with timer() as t:
        sample = reservoir_sample(iter_combinations(p, length), SAMPLE, random.Random(0))
    assert len(sample) == min(SAMPLE, total)
    tracemalloc.start()
    reservoir_sample(iter_combinations(p, length), SAMPLE, random.Random(0))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return total, t[0], peak


def _exhaustive_rate(n_facets: int) -> float:
    """Seconds to walk every two-turn combination (no sampling): the floor any sampler pays without skipping."""
    with timer() as t:
        n = sum(1 for _ in iter_combinations(pools(n_facets), 2))
    return t[0] / n


def _zipf_vocab(n: int, seed: int) -> tuple[list[str], np.ndarray]:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = sorted({"".join(rng.choice(letters) for _ in range(rng.randint(4, 9))) for _ in range(int(n * 1.2))})[:n]
    weights = 1.0 / np.arange(1, len(words) + 1) ** 1.07
    return words, weights / weights.sum()


def _docs(n_docs: int, words: list[str], probs: np.ndarray, seed: int, length: int = 24) -> list[str]:
    rng = np.random.default_rng(seed)
    ids = rng.choice(len(words), size=(n_docs, length), p=probs)
    vocab = np.array(words, dtype=object)
    return [" ".join(row) for row in vocab[ids]]


def _bm25(n_docs: int, queries: list[str], words: list[str], probs: np.ndarray) -> tuple[float, float, float]:
    docs = _docs(n_docs, words, probs, seed=n_docs)
    gc.collect()
    with timer() as build:
        index = BM25Index([f"d{i}" for i in range(n_docs)], docs)
    del docs
    index.search(queries[:10], 100)  # warm-up
    with timer() as search:
        hits = index.search(queries, 100)
    assert len(hits) == len(queries)
    mean_hits = sum(len(h) for h in hits) / len(hits)
    del index
    gc.collect()
    return build[0], search[0], mean_hits


def bench_retrieval() -> BenchResult:
    r = BenchResult("retrieval")
    small_f, big_f = 100, 1000
    say(f"session synthesis: {small_f} and {big_f} facets x {QA_PER_FACET} QA pairs, 2-turn, sample {SAMPLE:,}")
    n_small, t_small, m_small = _synthesis(small_f, 2)
    n_big, t_big, m_big = _synthesis(big_f, 2)
    r.add("synth_2turn_small_combinations", n_small, "2-turn combinations (100 facets)")
    r.add("synth_2turn_big_combinations", n_big, "2-turn combinations (1,000 facets)")
    r.add("synth_small_s_per_1k", 1000 * t_small / n_small, "stream + reservoir sample, per 1k combinations", "s",
          f"{t_small:.2f} s for {n_small:,}")
    r.add("synth_big_s_per_1k", 1000 * t_big / n_big, "  same at 10x the combinations", "s",
          f"{t_big:.2f} s for {n_big:,}")
    r.add("synth_time_ratio_10x", ratio(t_big, t_small), "time 10x combinations / time 1x", "x",
          "10x = linear in the stream length")
    r.add("synth_peak_small_mb", m_small / 2**20, "peak traced memory (100 facets)", "MiB")
    r.add("synth_peak_big_mb", m_big / 2**20, "peak traced memory (1,000 facets)", "MiB",
          "flat: the reservoir (10k sessions), not the stream")
    r.add("synth_peak_ratio_10x", ratio(m_big, m_small), "peak memory 10x / 1x", "x", "~1 = flat")
    per_item = _exhaustive_rate(big_f)
    r.add("synth_exhaustive_ns_per_combination", per_item * 1e9, "walking every combination (no skipping)", "ns",
          f"sampling / walking = {ratio(t_big / n_big, per_item):.2f}")
    n3 = count_combinations(pools(small_f), 3)
    with timer() as t3:
        reservoir_sample(iter_combinations(pools(small_f), 3), SAMPLE, random.Random(0))
    r.add("synth_3turn_s_per_1k", 1000 * t3[0] / n3, f"3-turn: {n3:,} combinations (100 facets), per 1k", "s",
          f"{t3[0]:.2f} s")

    words, probs = _zipf_vocab(50_000, 0)
    qrng = np.random.default_rng(1)
    queries = [" ".join(words[i] for i in qrng.choice(len(words), size=4, p=probs)) for _ in range(1000)]
    sizes = (100_000, 1_000_000)
    out = {}
    for n in sizes:
        say(f"BM25: {n:,} synthetic documents (24 Zipf words each), 1,000 queries, top 100")
        out[n] = _bm25(n, queries, words, probs)
    (b1, s1, h1), (b2, s2, h2) = out[sizes[0]], out[sizes[1]]
    r.add("bm25_build_100k_s", b1, "index 100k docs (tokenize + index)", "s")
    r.add("bm25_build_1m_s", b2, "index 1M docs", "s", f"per 1k docs: {1000 * b1 / sizes[0]:.3f} -> "
                                                        f"{1000 * b2 / sizes[1]:.3f} s")
    r.add("bm25_build_ratio_10x", ratio(b2, b1), "index time 10x docs / 1x", "x", "10x = linear")
    r.add("bm25_qps_100k", len(queries) / s1, "queries/s over 100k docs (top 100)", "q/s", f"mean hits {h1:.0f}")
    r.add("bm25_qps_1m", len(queries) / s2, "queries/s over 1M docs (top 100)", "q/s", f"mean hits {h2:.0f}")
    r.add("bm25_query_time_ratio_10x", ratio(s2, s1), "time per 1k queries, 10x docs / 1x", "x",
          "posting lists grow with the collection: ~10x at worst")
    r.add("bm25_search_s_per_1k_queries_1m", 1000 * s2 / len(queries), "time per 1k queries over 1M docs", "s",
          f"log10 slope {math.log10(max(ratio(s2, s1), 1e-9)):.2f}")
    return r
