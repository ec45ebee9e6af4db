"""Exact + semantic dedup (ClarifyMT-Bench §4.1, Eqs. 5-7) with hand-made vectors instead of a model."""

import math

import numpy as np
import pytest
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from dagster_project.core.shared.dedup import (
    NO_SEARCH,
    AnnSearch,
    ann_pairs,
    find_pairs,
    merge_searches,
    normalise,
    semantic_dedup,
    similar_pairs,
)


def fake_embed(vectors: dict[str, list[float]], calls: list | None = None):
    def embed(texts: list[str]) -> np.ndarray:
        if calls is not None:
            calls.append(list(texts))
        return np.array([vectors[t] for t in texts], dtype=float)
    return embed


def unit(deg: float) -> list[float]:
    r = math.radians(deg)
    return [math.cos(r), math.sin(r)]


def rows(result):
    return result.table.to_dicts()


def test_normalise():
    assert normalise("  What's   the BASS?! ") == "what s the bass"
    assert normalise("what's the bass") == normalise("WHAT'S THE BASS???")


def test_table_columns():
    res = semantic_dedup(["a", "b"], [1, 1], fake_embed({"a": [1, 0], "b": [0, 1]}))
    assert res.table.columns == ["row", "cluster", "kept", "duplicate_of", "similarity", "dedup_reason"]


def test_cluster_keeps_highest_quality_not_first():
    # cos(a, b) = 0.9 / sqrt(0.82) = 0.99388 > 0.7; c is orthogonal to a and nearly so to b.
    vecs = {"a": [1, 0], "b": [0.9, 0.1], "c": [0, 1]}
    res = semantic_dedup(["a", "b", "c"], [2.0, 5.0, 1.0], fake_embed(vecs), tau=0.7)
    t = rows(res)
    assert [r["kept"] for r in t] == [False, True, True]
    assert t[0]["duplicate_of"] == 1 and t[0]["dedup_reason"] == "semantic"
    assert t[0]["cluster"] == 1
    assert t[0]["similarity"] == pytest.approx(0.9 / math.sqrt(0.82), abs=1e-5)
    assert t[1]["duplicate_of"] == -1 and t[1]["dedup_reason"] is None and math.isnan(t[1]["similarity"])
    assert t[2]["duplicate_of"] == -1
    assert res.summary() == {"dedup_input": 3, "dedup_kept": 2, "dedup_removed": 1, "dedup_clusters": 2,
                             "dedup_method": "exact", "dedup_candidates": 3,
                             "dedup_verified_pairs": 1}


def test_tie_keeps_earliest():
    vecs = {"a": [1, 0], "b": [0.9, 0.1], "c": [0.95, 0.05]}
    res = semantic_dedup(["a", "b", "c"], [3, 3, 3], fake_embed(vecs))
    assert res.table["kept"].to_list() == [True, False, False]
    assert res.table["duplicate_of"].to_list() == [-1, 0, 0]
    # a tie among the best of a cluster: the earliest of the best wins
    res = semantic_dedup(["a", "b", "c"], [1, 4, 4], fake_embed(vecs))
    assert res.table["kept"].to_list() == [False, True, False]
    assert res.table["duplicate_of"].to_list() == [1, -1, 1]


def test_nan_quality_never_beats_a_score():
    vecs = {"a": [1, 0], "b": [0.9, 0.1]}
    res = semantic_dedup(["a", "b"], [float("nan"), 1.0], fake_embed(vecs))
    assert res.table["kept"].to_list() == [False, True]


def test_exact_duplicates_removed_with_reason_exact():
    texts = ["What is bass?", "what   is BASS", "Other thing.", "WHAT IS BASS!!"]
    calls: list = []
    vecs = {"what   is BASS": [1, 0], "Other thing.": [0, 1]}
    res = semantic_dedup(texts, [1, 5, 2, 5], fake_embed(vecs, calls))
    t = rows(res)
    # best quality among the three exact copies is 5 (rows 1 and 3) -> earliest of those, row 1
    assert [r["kept"] for r in t] == [False, True, True, False]
    assert [r["duplicate_of"] for r in t] == [1, -1, -1, 1]
    assert [r["dedup_reason"] for r in t] == ["exact", None, None, "exact"]
    assert t[0]["similarity"] == 1.0 and t[3]["similarity"] == 1.0
    # only one text per exact group is embedded
    assert calls == [["what   is BASS", "Other thing."]]
    assert res.summary() == {"dedup_input": 4, "dedup_kept": 2, "dedup_removed": 2, "dedup_clusters": 2,
                             "dedup_method": "exact", "dedup_candidates": 1,
                             "dedup_verified_pairs": 0}


def test_all_exact_duplicates_need_no_embedding():
    def boom(texts):
        raise AssertionError("embed must not be called for a single unique text")
    res = semantic_dedup(["Hi there", "hi, there!", "HI THERE"], [1, 1, 2], boom)
    assert res.table["kept"].to_list() == [False, False, True]
    assert res.table["dedup_reason"].to_list() == ["exact", "exact", None]
    assert res.summary()["dedup_kept"] == 1
    assert res.summary()["dedup_method"] == "none"  # no vector search ran


def test_pair_split_across_blocks_is_found():
    # rows 0 and 3 are near-identical; with block=2 they sit in different blocks
    vecs = {"r0": [1, 0, 0], "r1": [0, 1, 0], "r2": [0, 0, 1], "r3": [1, 0.1, 0]}
    texts = ["r0", "r1", "r2", "r3"]
    res = semantic_dedup(texts, [1, 1, 1, 2], fake_embed(vecs), tau=0.7, block=2)
    assert res.table["kept"].to_list() == [False, True, True, True]
    assert res.table["duplicate_of"].to_list() == [3, -1, -1, -1]
    assert res.table["similarity"][0] == pytest.approx(1 / math.sqrt(1.01), abs=1e-5)
    big = semantic_dedup(texts, [1, 1, 1, 2], fake_embed(vecs), tau=0.7, block=2048)
    assert big.table.equals(res.table)
    one = semantic_dedup(texts, [1, 1, 1, 2], fake_embed(vecs), tau=0.7, block=1)
    assert one.table.equals(res.table)


def test_transitive_chain_is_one_cluster():
    # 0 deg ~ 40 deg (cos 0.766) ~ 80 deg (cos 0.766) but 0 deg vs 80 deg is cos 0.174 < tau
    vecs = {"a": unit(0), "b": unit(40), "c": unit(80), "d": unit(180)}
    res = semantic_dedup(["a", "b", "c", "d"], [1, 1, 9, 1], fake_embed(vecs), tau=0.7)
    t = rows(res)
    assert [r["kept"] for r in t] == [False, False, True, True]
    assert [r["duplicate_of"] for r in t] == [2, 2, -1, -1]
    assert [r["cluster"] for r in t] == [2, 2, 2, 3]
    assert [r["dedup_reason"] for r in t] == ["semantic", "semantic", None, None]
    # similarity is to the representative, which may be below tau for chain members
    assert t[0]["similarity"] == pytest.approx(math.cos(math.radians(80)), abs=1e-5)
    assert t[1]["similarity"] == pytest.approx(math.cos(math.radians(40)), abs=1e-5)
    assert res.summary() == {"dedup_input": 4, "dedup_kept": 2, "dedup_removed": 2, "dedup_clusters": 2,
                             "dedup_method": "exact", "dedup_candidates": 6,
                             "dedup_verified_pairs": 2}


def test_nothing_above_tau_keeps_all():
    vecs = {"a": unit(0), "b": unit(50), "c": unit(100)}  # neighbours at cos 0.643 < 0.7
    res = semantic_dedup(["a", "b", "c"], [1, 2, 3], fake_embed(vecs), tau=0.7)
    assert res.table["kept"].to_list() == [True, True, True]
    assert res.table["duplicate_of"].to_list() == [-1, -1, -1]
    assert res.table["dedup_reason"].null_count() == 3
    assert res.summary() == {"dedup_input": 3, "dedup_kept": 3, "dedup_removed": 0, "dedup_clusters": 3,
                             "dedup_method": "exact", "dedup_candidates": 3,
                             "dedup_verified_pairs": 0}
    # lowering tau below 0.643 merges the chain a-b-c into one cluster kept at c (quality 3)
    low = semantic_dedup(["a", "b", "c"], [1, 2, 3], fake_embed(vecs), tau=0.6)
    assert low.table["duplicate_of"].to_list() == [2, 2, -1]


def test_duplicate_of_always_points_at_a_kept_row_and_counts_reconcile():
    texts = ["a", "A!", "b", "c", "d", "e", "E", "f"]
    vecs = {"A!": unit(0), "b": unit(5), "c": unit(90), "d": unit(92), "e": unit(180), "f": unit(270)}
    quality = [1, 2, 3, 1, 1, 1, 1, 0]  # "A!" (q 2) represents the exact group {a, A!}
    res = semantic_dedup(texts, quality, fake_embed(vecs), tau=0.7, block=3)
    t = res.table
    kept = set(t.filter(t["kept"])["row"].to_list())
    for r in t.filter(~t["kept"]).to_dicts():
        assert r["duplicate_of"] in kept
        assert r["cluster"] == r["duplicate_of"]
        assert r["dedup_reason"] in ("exact", "semantic")
    # clusters: {a, A!, b} -> b (q 3); {c, d} -> c (tie, earliest); {e, E} -> e; {f}
    assert t["duplicate_of"].to_list() == [2, 2, -1, -1, 3, -1, 5, -1]
    # "a" was first merged exactly into "A!", but its final representative "b" is different text: semantic,
    # with the similarity of its exact group to "b" (cos 5 degrees), not 1.0
    assert t["dedup_reason"].to_list() == ["semantic", "semantic", None, None, "semantic", None, "exact", None]
    assert t["similarity"][0] == pytest.approx(float(np.cos(np.radians(5))), abs=1e-6)
    assert t["similarity"][6] == pytest.approx(1.0)
    s = res.summary()
    assert s["dedup_kept"] + s["dedup_removed"] == s["dedup_input"] == len(texts)
    assert s == {"dedup_input": 8, "dedup_kept": 4, "dedup_removed": 4, "dedup_clusters": 4,
                             "dedup_method": "exact", "dedup_candidates": 15,
                             "dedup_verified_pairs": 2}


def test_empty_input():
    res = semantic_dedup([], [], fake_embed({}))
    assert res.table.height == 0
    assert res.summary()["dedup_kept"] == 0


# ---------------------------------------------------------------- similar_pairs

def as_set(i, j):
    return set(zip(i.tolist(), j.tolist()))


def test_similar_pairs_upper_triangle_only():
    v = np.array([[1, 0], [2, 0], [0, 1], [0, 3], [1, 0.05]], dtype=float)
    for block in (1, 2, 3, 100):
        i, j, s = similar_pairs(v, tau=0.7, block=block)
        assert as_set(i, j) == {(0, 1), (0, 4), (1, 4), (2, 3)}
        assert len(i) == 4  # no duplicates, no (j, i), no (i, i)
        assert all(a < b for a, b in zip(i, j))
        sims = dict(zip(zip(i.tolist(), j.tolist()), s.tolist()))
        assert sims[(0, 1)] == pytest.approx(1.0, abs=1e-6)  # cosine, not dot product (which is 2)
        assert sims[(0, 4)] == pytest.approx(1 / math.sqrt(1.0025), abs=1e-6)


def test_similar_pairs_threshold_is_strict_and_zero_vectors_are_safe():
    v = np.array([[1, 0], [2, 0], [0, 0]], dtype=float)
    i, j, _ = similar_pairs(v, tau=1.0, block=2)
    assert len(i) == 0  # cosine exactly 1.0 is not > 1.0
    i, j, _ = similar_pairs(v, tau=0.5, block=2)
    assert as_set(i, j) == {(0, 1)}


def test_similar_pairs_empty():
    i, j, s = similar_pairs(np.zeros((0, 3)), tau=0.7, block=4)
    assert len(i) == len(j) == len(s) == 0


# ---------------------------------------------------------------- ANN path (faiss IVF) vs the exact path
# nprobe >= the number of cells (600 rows -> 15) makes the index exhaustive, so the ANN path must find exactly
# the exact path's pairs; its recall when it probes fewer cells is measured by benchmarks/bench_dedup.py.

def planted(seed: int = 0, n: int = 600, dim: int = 32, group: int = 12) -> np.ndarray:
    """Random vectors (pairwise cosine ~ N(0, 1/32), rarely near 0.7) with planted near-copies: 20 pairs, one
    group of `group` copies of one row, and two tight sub-groups that are close to each other."""
    rng = np.random.default_rng(seed)
    v = rng.standard_normal((n, dim))
    idx = rng.permutation(n)
    for src, dst in zip(idx[:20], idx[20:40]):
        v[dst] = v[src] + 0.1 * np.linalg.norm(v[src]) / np.sqrt(dim) * rng.standard_normal(dim)
    centre = v[idx[40]]
    for dst in idx[41:41 + group]:
        v[dst] = centre + 0.1 * np.linalg.norm(centre) / np.sqrt(dim) * rng.standard_normal(dim)
    # sub-groups A and B, 6 rows each: within a sub-group cosine ~0.999, across ~0.9; every row's 5 nearest
    # neighbours are in its own sub-group, so only the widened search links A to B with the exact pairs
    base = v[idx[60]]
    shift = 0.45 * np.linalg.norm(base) / np.sqrt(dim) * rng.standard_normal(dim)
    for k, dst in enumerate(idx[61:73]):
        v[dst] = base + (shift if k < 6 else -shift) + 0.01 * np.linalg.norm(base) * rng.standard_normal(dim) / 6
    return v


def test_planted_set_has_big_groups_and_no_chance_pairs_near_tau():
    v = planted()
    i, j, _ = similar_pairs(v, 0.7, 256)
    sizes = np.bincount(connected_components(coo_matrix((np.ones(len(i)), (i, j)), shape=(len(v),) * 2))[1])
    assert sorted(sizes)[-3:] == [2, 13, 13] and len(i) > 20 + 12 * 13 // 2
    _, _, near = similar_pairs(v, 0.65, 256)
    assert ((near > 0.65) & (near < 0.75)).sum() == 0  # no pair close to the threshold: the set is unambiguous


@pytest.mark.parametrize("k", [2, 5, 16])
def test_ann_pairs_equal_exact_pairs_with_groups_larger_than_k(k):
    v = planted()
    exact = find_pairs(v, 0.7, 128, AnnSearch(exact_max=len(v), k=k, nprobe=64))
    ann = find_pairs(v, 0.7, 128, AnnSearch(exact_max=0, k=k, nprobe=64))  # threshold 0: the ANN path
    assert (exact.method, ann.method) == ("exact", "ann")
    assert as_set(ann.i, ann.j) == as_set(exact.i, exact.j)
    got = dict(zip(zip(ann.i.tolist(), ann.j.tolist()), ann.sim.tolist()))
    want = dict(zip(zip(exact.i.tolist(), exact.j.tolist()), exact.sim.tolist()))
    assert all(got[p] == pytest.approx(want[p], abs=1e-5) for p in want)
    assert all(a < b for a, b in zip(ann.i, ann.j))
    assert len(exact.i) <= ann.candidates < exact.candidates  # verified only the neighbours, not all pairs
    assert ann.summary() == {"dedup_method": "ann", "dedup_candidates": ann.candidates,
                             "dedup_verified_pairs": len(exact.i)}


def test_ann_pairs_repeat_identically():
    v = planted(seed=3)
    runs = [ann_pairs(v, 0.7, 4, 4) for _ in range(2)]  # partial probing: same seed, same result
    assert as_set(runs[0].i, runs[0].j) == as_set(runs[1].i, runs[1].j)
    assert runs[0].candidates == runs[1].candidates


def test_semantic_dedup_ann_table_equals_exact_table():
    v = planted(seed=1)
    texts = [f"t{k}" for k in range(len(v))] + ["T0!"]  # the last row is an exact duplicate of t0
    quality = list(np.random.default_rng(1).random(len(texts)))
    embed = fake_embed({t: list(v[k]) for k, t in enumerate(texts[:-1])})
    exact = semantic_dedup(texts, quality, embed, tau=0.7, block=100)
    ann = semantic_dedup(texts, quality, embed, tau=0.7, block=100, ann=AnnSearch(0, k=3, nprobe=64))
    assert ann.table.equals(exact.table)
    assert exact.summary()["dedup_method"] == "exact" and ann.summary()["dedup_method"] == "ann"
    assert ann.summary()["dedup_verified_pairs"] == exact.summary()["dedup_verified_pairs"] > 100
    assert int((ann.table["dedup_reason"] == "semantic").sum()) > 30
    # the threshold counts unique texts: exactly at exact_max the exact path still runs
    at = semantic_dedup(texts, quality, embed, tau=0.7, block=100, ann=AnnSearch(len(v), k=3, nprobe=64))
    assert at.summary()["dedup_method"] == "exact"
    over = semantic_dedup(texts, quality, embed, tau=0.7, block=100, ann=AnnSearch(len(v) - 1, k=3, nprobe=64))
    assert over.summary()["dedup_method"] == "ann"


def test_ann_pairs_zero_vectors_and_tiny_inputs():
    v = np.array([[1, 0, 0], [0, 0, 0], [0.99, 0.05, 0], [0, 1, 0], [0, 0, 0]], dtype=float)
    ann = ann_pairs(v, 0.5, 1, 2)
    assert as_set(ann.i, ann.j) == as_set(*similar_pairs(v, 0.5, 2)[:2]) == {(0, 2)}
    for w in (np.zeros((0, 3)), np.ones((1, 3)), np.zeros((3, 3))):
        assert len(ann_pairs(w, 0.5, 4, 2).i) == 0


def test_merge_searches_names_every_method_and_sums_the_counts():
    exact = {"dedup_method": "exact", "dedup_candidates": 6, "dedup_verified_pairs": 1}
    ann = {"dedup_method": "ann", "dedup_candidates": 40, "dedup_verified_pairs": 3}
    assert merge_searches([exact, NO_SEARCH, exact]) == {"dedup_method": "exact", "dedup_candidates": 12,
                                                         "dedup_verified_pairs": 2}
    assert merge_searches([exact, ann])["dedup_method"] == "ann+exact"
    assert merge_searches([NO_SEARCH]) == merge_searches([]) == NO_SEARCH
