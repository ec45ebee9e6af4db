"""One path per concern: every MiniLM user reaches the encoder through params.yaml `embedder.model` (the
EmbedderResource built in definitions.py). A second local encoder, set there, changes what each user computes:
dedup / Intent-Sim / dense retrieval (embedder.encode), BERTScore (embedder.model_path) and re-ranker training."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from dagster_project.config import parse_params
from dagster_project.core.shared.metrics import bertscore_f1
from dagster_project.definitions import build_definitions
from dagster_project.llm.embedder import minilm_path

REPO = Path(__file__).resolve().parents[2]
TEXTS = ["Which city do you mean?", "Book a table for two tonight."]


@pytest.fixture(scope="module")
def other_encoder(tmp_path_factory) -> str:
    """MiniLM with its word embeddings negated: another local encoder whose every layer's output differs."""
    from sentence_transformers import SentenceTransformer, models

    word = models.Transformer(minilm_path())
    word.auto_model.embeddings.word_embeddings.weight.data.mul_(-1.0)
    pool = models.Pooling(word.get_word_embedding_dimension(), pooling_mode="mean")
    folder = tmp_path_factory.mktemp("models") / "minilm-negated"
    SentenceTransformer(modules=[word, pool], device="cpu").save(str(folder))
    return str(folder)


def _embedder(model: str | None = None):
    section = {"model": model} if model else {}
    return build_definitions(parse_params({"embedder": section})).resources["embedder"]


def test_encode_users_follow_embedder_model(other_encoder):
    """Dedup, Intent-Sim and dense retrieval all call embedder.encode: other vectors, not just another label."""
    default, other = _embedder(), _embedder(other_encoder)
    assert other.model_path() == other_encoder and default.model_path() == minilm_path()
    assert not np.allclose(default.encode(TEXTS), other.encode(TEXTS), atol=1e-3)


def test_bertscore_follows_embedder_model(other_encoder):
    cand, ref = ["Do you mean the fish or the instrument?"], ["Are you asking about the fish or the guitar?"]
    a = bertscore_f1(cand, ref, _embedder().model_path(), num_layers=2)
    b = bertscore_f1(cand, ref, _embedder(other_encoder).model_path(), num_layers=2)
    assert abs(a[0] - b[0]) > 1e-4


def test_reranker_training_starts_from_embedder_model(other_encoder, tmp_path):
    from dagster_project.config import TrainingConfig
    from dagster_project.training.reranker_training import NAME, train_reranker

    cfg = TrainingConfig.model_validate({"device": "cpu", "reranker": {"max_steps": 1, "batch_size": 2}})
    rows = [{"anchor": "fish or instrument", "positive": "bass the fish", "negative": "bass guitar"},
            {"anchor": "capital of australia", "positive": "Canberra", "negative": "Sydney"}]
    row = train_reranker(rows, cfg, tmp_path, "retrieval/reranker_training", encoder=other_encoder)
    assert row["status"] == "trained", row
    meta = json.loads((tmp_path / NAME / "training.json").read_text())
    assert meta["base_model"] == other_encoder and meta["config"]["base_model"] == other_encoder


def test_no_module_reaches_minilm_but_through_the_embedder():
    """minilm_path() is called only by llm/embedder.py (encoder_path): no user bypasses embedder.model."""
    callers = [str(f.relative_to(REPO)) for f in (REPO / "dagster_project").rglob("*.py")
               if re.search(r"\bminilm_path\(\)", f.read_text()) and f.name != "embedder.py"]
    assert callers == []
