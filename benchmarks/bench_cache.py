"""Benchmark 2: LLMCache.put_many / get_many throughput at 10k and 100k synthetic rows (SQLite, WAL)."""

from __future__ import annotations

import hashlib
import random
import tempfile
from pathlib import Path

from _common import BenchResult, ratio, say, timer

from dagster_project.llm.cache import LLMCache


def _rows(n: int, tag: str) -> list[tuple[str, str, str, int, int]]:
    rng = random.Random(n)
    return [
        (hashlib.sha256(f"{tag}-{i}".encode()).hexdigest(), "smollm2-135m-instruct",
         f"The clarifying question is: which option {i} do you mean? " + "x" * rng.randint(20, 200),
         rng.randint(30, 400), rng.randint(5, 64))
        for i in range(n)
    ]


def _one_size(n: int, path: Path) -> dict[str, float]:
    cache = LLMCache(path)
    rows = _rows(n, "hit")
    keys = [r[0] for r in rows]
    random.Random(1).shuffle(keys)                       # lookups arrive in another order than inserts
    misses = [r[0] for r in _rows(n, "miss")]
    with timer() as t_put:
        cache.put_many(rows)                             # one transaction, as one backend chunk commit
    with timer() as t_hit:
        got = cache.get_many(keys)
    with timer() as t_miss:
        none = cache.get_many(misses)                    # a fresh batch: every key absent
    assert len(got) == n and not none, "cache returned wrong rows"
    return {"put_s": t_put[0], "get_hit_s": t_hit[0], "get_miss_s": t_miss[0]}


def bench_cache(sizes: tuple[int, int] = (10_000, 100_000), small_chunk: int = 4, repeats: int = 3) -> BenchResult:
    """Each size runs `repeats` times on a fresh database file; each operation reports its best time."""
    res = BenchResult("cache")
    small, big = sizes
    with tempfile.TemporaryDirectory(prefix="bench_cache_") as d:
        tmp = Path(d)
        out = {}
        for n in sizes:
            say(f"cache: {n:,} rows, best of {repeats}")
            runs = [_one_size(n, tmp / f"cache_{n}_{k}.sqlite") for k in range(repeats)]
            out[n] = {op: min(r[op] for r in runs) for op in runs[0]}
        # What the llama.cpp backend actually does: commit every chunk_size (=4) requests.
        say(f"cache: {small:,} rows in chunks of {small_chunk}")
        cache = LLMCache(tmp / "chunked.sqlite")
        rows = _rows(small, "chunked")
        with timer() as t_chunk:
            for s in range(0, small, small_chunk):
                cache.put_many(rows[s:s + small_chunk])
    for n in sizes:
        k = f"{n // 1000}k"
        res.add(f"put_many_{k}_rows_per_s", n / out[n]["put_s"], f"put_many {n:,} rows (1 txn)", "rows/s",
                note=f"{out[n]['put_s']:.3f} s (each op: best of {repeats})")
        res.add(f"get_many_hit_{k}_rows_per_s", n / out[n]["get_hit_s"], f"get_many {n:,} keys, all hits", "rows/s",
                note=f"{out[n]['get_hit_s']:.3f} s")
        res.add(f"get_many_miss_{k}_rows_per_s", n / out[n]["get_miss_s"], f"get_many {n:,} keys, all misses",
                "rows/s", note=f"{out[n]['get_miss_s']:.3f} s")
    f = big / small
    for op in ("put", "get_hit", "get_miss"):
        res.add(f"{op}_time_ratio_{big // small}x_rows", ratio(out[big][f"{op}_s"], out[small][f"{op}_s"]),
                f"{op} time {big // 1000}k / {small // 1000}k", "x", note=f"linear would be {f:.0f}x")
    res.add(f"put_many_chunked{small_chunk}_{small // 1000}k_rows_per_s", small / t_chunk[0],
            f"put_many {small:,} rows in txns of {small_chunk}", "rows/s",
            note=f"{t_chunk[0]:.3f} s; {ratio(t_chunk[0], out[small]['put_s']):.1f}x the 1-txn time")
    return res
