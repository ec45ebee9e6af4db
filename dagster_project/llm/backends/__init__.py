"""Backends by name; each imports its engine (llama_cpp, openai, vllm, transformers) only when a role first uses it."""

from __future__ import annotations

from collections.abc import Callable

from dagster_project.config import RoleConfig
from dagster_project.llm.backends.base import Backend
from dagster_project.llm.backends.llamacpp import LlamaCppBackend
from dagster_project.llm.backends.openai import OpenAIBackend
from dagster_project.llm.backends.transformers import TransformersBackend
from dagster_project.llm.backends.vllm import VLLMBackend

BACKENDS: dict[str, Callable[[RoleConfig], Backend]] = {
    "llamacpp": LlamaCppBackend, "openai": OpenAIBackend, "vllm": VLLMBackend, "transformers": TransformersBackend,
}
