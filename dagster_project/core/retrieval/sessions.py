"""ClariMM §3.1 session synthesis: the QA pairs one facet (hidden intent) received are combined into 2-, 3- and
4-turn conversations with ``itertools.combinations`` chained over facets, a stream that is never
materialised, and ``per_length`` sessions are drawn from it by seeded reservoir sampling (Algorithm L)."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

import polars as pl

T = TypeVar("T")


def facet_pools(qa: pl.DataFrame) -> list[tuple[str, list[str]]]:
    """(facet_id, qa_ids in question order) for every facet: the QA pairs one hidden intent received."""
    pools = qa.sort("facet_id", "question_id").group_by("facet_id", maintain_order=True).agg(pl.col("qa_id"))
    return [(f, list(ids)) for f, ids in pools.iter_rows()]


def count_combinations(pools: Sequence[tuple[str, Sequence[str]]], length: int) -> int:
    """How many length-turn conversations the exhaustive synthesis yields (without generating them)."""
    return sum(math.comb(len(ids), length) for _, ids in pools)


def iter_combinations(pools: Sequence[tuple[str, Sequence[str]]], length: int) -> Iterator[tuple[str, tuple[str, ...]]]:
    """Every (facet_id, qa_ids) conversation of the given length, streamed facet after facet (never stored)."""
    return itertools.chain.from_iterable(
        zip(itertools.repeat(facet), itertools.combinations(ids, length)) for facet, ids in pools)


def _unit(rng: random.Random) -> float:
    u = rng.random()
    while u == 0.0:
        u = rng.random()
    return u


def reservoir_sample(items: Iterable[T], k: int, rng: random.Random) -> list[tuple[int, T]]:
    """A uniform sample of k items from a stream of unknown length, as (stream index, item) in stream order.

    Algorithm L (Li 1994): after the reservoir fills, the number of items to skip is drawn directly and the
    skipped items are consumed by ``itertools.islice`` in C, so memory is O(k) and time is dominated by
    generating the stream, not by Python per item. Fewer than k items: all of them.
    """
    if k <= 0:
        return []
    it = iter(items)
    reservoir = list(enumerate(itertools.islice(it, k)))
    if len(reservoir) < k:
        return reservoir
    sentinel = object()
    index = k - 1
    w = math.exp(math.log(_unit(rng)) / k)
    while True:
        skip = math.floor(math.log(_unit(rng)) / math.log1p(-w)) if w < 1.0 else 0
        item = next(itertools.islice(it, skip, skip + 1), sentinel)
        if item is sentinel:
            break
        index += skip + 1
        reservoir[rng.randrange(k)] = (index, item)
        w *= math.exp(math.log(_unit(rng)) / k)
    return sorted(reservoir, key=lambda x: x[0])


CANDIDATE_SCHEMA = {
    "session_id": pl.Utf8, "facet_id": pl.Utf8, "sampled_length": pl.Int64, "stream_index": pl.Int64,
    "combinations_available": pl.Int64, "target_per_length": pl.Int64, "qa_ids": pl.List(pl.Utf8),
}


def sample_sessions(pools: Sequence[tuple[str, Sequence[str]]], lengths: Sequence[int], per_length: int,
                    seed: int) -> pl.DataFrame:
    """Seeded reservoir sample of per_length conversations per length from the streamed combinations.

    Each length has its own generator seeded by (seed, length), so adding a length does not change the
    sessions drawn for the others. session_id = L<length>:<facet_id>:<question ids joined by '+'>.
    """
    rows = []
    for length in lengths:
        available = count_combinations(pools, length)
        rng = random.Random(f"{seed}:{length}")
        for index, (facet, ids) in reservoir_sample(iter_combinations(pools, length), per_length, rng):
            qids = "+".join(i.split("/", 1)[1] for i in ids)
            rows.append({"session_id": f"L{length}:{facet}:{qids}", "facet_id": facet, "sampled_length": length,
                         "stream_index": index, "combinations_available": available,
                         "target_per_length": per_length, "qa_ids": list(ids)})
    return pl.DataFrame(rows, schema=CANDIDATE_SCHEMA)
