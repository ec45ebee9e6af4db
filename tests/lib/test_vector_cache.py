"""llm/vector_cache.py and the cached EmbedderResource: a text is encoded once per model, across calls and
processes' runs; a new model or a new text is encoded; rows come back in input order, duplicates included."""

from __future__ import annotations

import numpy as np

from dagster_project.lib import resources
from dagster_project.lib.resources import EmbedderResource
from dagster_project.llm.vector_cache import VectorCache


def counting_encoder(calls: list[list[str]]):
    def encode(texts, model="m", batch_size=64):
        calls.append(list(texts))
        return np.array([[len(t), ord(t[0]), len(model)] for t in texts], dtype=np.float32)

    return encode


def test_rows_are_computed_once_and_returned_in_order(tmp_path):
    calls: list[list[str]] = []
    cache = VectorCache(tmp_path / "v.sqlite")
    enc = counting_encoder(calls)
    first = cache.rows("ns", ["bb", "a", "bb"], enc)
    assert calls == [["bb", "a"]]  # distinct missing texts only
    again = VectorCache(tmp_path / "v.sqlite").rows("ns", ["a", "ccc", "bb"], enc)
    assert calls == [["bb", "a"], ["ccc"]]
    assert first.tolist() == [[2, 98, 1], [1, 97, 1], [2, 98, 1]]
    assert again.tolist() == [[1, 97, 1], [3, 99, 1], [2, 98, 1]]
    cache.rows("other-model", ["a"], enc)
    assert calls[-1] == ["a"]  # the namespace is part of the key


def test_one_number_per_text_and_many_keys(tmp_path):
    texts = [f"t{i}" for i in range(2000)]  # more than one IN (...) chunk
    cache = VectorCache(tmp_path / "v.sqlite")
    out = cache.rows("score", texts, lambda ts: np.array([float(t[1:]) for t in ts]))
    assert out.shape == (2000, 1)
    assert cache.rows("score", texts[::-1], lambda ts: 1 / 0)[:3, 0].tolist() == [1999, 1998, 1997]


def test_embedder_resource_reads_the_cache(tmp_path, monkeypatch):
    calls: list[list[str]] = []
    monkeypatch.setattr(resources, "encode", counting_encoder(calls))
    emb = EmbedderResource(model="mm", cache_path=str(tmp_path / "e.sqlite"))
    a = emb.encode(["x", "yy"])
    b = emb.encode(["yy", "x"])
    assert calls == [["x", "yy"]]
    assert a.tolist() == b[::-1].tolist() == [[1, 120, 2], [2, 121, 2]]
    assert emb.encode([]).shape[0] == 0
    EmbedderResource(model="mm").encode(["x"])  # no cache_path: always encodes
    assert calls[-1] == ["x"]
