"""params.yaml `embedder` reaches the encoder: definitions.py builds the EmbedderResource from params
(it used to build one with its own defaults, so changing embedder.model relabelled rows but not the vectors)."""

import numpy as np
import pytest

from dagster_project.config import parse_params
from dagster_project.definitions import build_definitions
from dagster_project.llm.embedder import minilm_path

TEXTS = ["Which city do you mean?", "Book a table for two tonight."]


@pytest.fixture(scope="module")
def second_model(tmp_path_factory) -> str:
    """A second local sentence encoder: MiniLM's transformer with CLS pooling instead of mean pooling."""
    from sentence_transformers import SentenceTransformer, models

    word = models.Transformer(minilm_path())
    pool = models.Pooling(word.get_word_embedding_dimension(), pooling_mode="cls")
    folder = tmp_path_factory.mktemp("models") / "minilm-cls"
    SentenceTransformer(modules=[word, pool], device="cpu").save(str(folder))
    return str(folder)


def _embedder(**section):
    return build_definitions(parse_params({"embedder": section})).resources["embedder"]


def test_embedder_model_and_batch_size_come_from_params(second_model):
    default, other = _embedder(), _embedder(model=second_model, batch_size=3)
    assert (other.model, other.batch_size) == (second_model, 3)
    a, b = default.encode(TEXTS), other.encode(TEXTS)
    assert a.shape == b.shape == (2, 384)
    assert not np.allclose(a, b, atol=1e-3)  # other vectors, not just another label
    np.testing.assert_allclose(np.linalg.norm(b, axis=1), 1.0, rtol=1e-5)
