"""The resources every asset gets, built once from params.yaml in definitions.py (never re-read per asset)."""

from __future__ import annotations

from collections.abc import Callable

import dagster as dg
import numpy as np

from dagster_project.config import LLMConfig, RoleConfig
from dagster_project.llm.embedder import encode, encoder_path
from dagster_project.llm.vector_cache import VectorCache
from dagster_project.llm.backends.base import Backend
from dagster_project.llm.client import DryRun, LLMClient, LLMSession


class LLMResource:
    """The LLM client behind every role (params.yaml `llm`); `session(context)` is what an asset calls."""

    def __init__(self, config: LLMConfig, backends: dict[str, Callable[[RoleConfig], Backend]] | None = None,
                 dry_run: DryRun | None = None):
        self.client = LLMClient(config, backends, dry_run)

    def session(self, context: dg.AssetExecutionContext | None = None) -> LLMSession:
        """A chat callable for one asset execution: progress to the run log, usage for the asset's metadata."""
        if context is None:
            return LLMSession(self.client)
        try:
            tag = context.asset_key.to_user_string()
        except Exception:  # noqa: BLE001 - a multi-asset context has no single key
            tag = ""
        return LLMSession(self.client, progress=context.log.info, tag=tag)

    def with_subjects(self, extra: dict[str, RoleConfig]) -> LLMResource:
        """This resource with more subjects (e.g. a trained model params does not list), on the same backends,
        cache and dry-run hook; itself when there is nothing new."""
        config = self.client.config
        extra = {name: role for name, role in extra.items() if name not in config.subjects}
        if not extra:
            return self
        wider = config.model_copy(update={"subjects": {**config.subjects, **extra}})
        return LLMResource(wider, self.client._factories, self.client.dry_run)  # noqa: SLF001 - same factories


class EmbedderResource(dg.ConfigurableResource):
    """Sentence encoder for semantic dedup and similarity (params.yaml `embedder`: model name or local folder)."""

    model: str = "all-MiniLM-L6-v2"
    batch_size: int = 64
    cache_path: str | None = None  # params.yaml embedder.cache_path: vectors by content hash (None: no cache)

    def model_path(self) -> str:
        """The encoder's local folder: every MiniLM user (dedup, Intent-Sim, BERTScore, retrieval, re-ranker
        training) reaches the model through this resource."""
        return encoder_path(self.model)

    def encode(self, texts: list[str]) -> np.ndarray:
        if self.cache_path is None or not texts:
            return encode(texts, self.model, self.batch_size)
        return VectorCache(self.cache_path).rows(f"embed:{self.model}", texts,
                                                 lambda missing: encode(missing, self.model, self.batch_size))

