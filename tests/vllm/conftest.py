"""tests/vllm/ runs only under `make test-vllm` (in .venv-vllm, with CLARIFY_VLLM_TESTS=1).

`make test` runs in .venv, which has no vLLM: this folder is left out of its collection, so its default
collection is unchanged. Here the settings that matter on a 2-core CPU are fixed before vLLM is imported.
"""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENABLED = os.environ.get("CLARIFY_VLLM_TESTS") == "1"


def pytest_ignore_collect(collection_path, config):
    if not ENABLED and collection_path.suffix == ".py" and collection_path.name.startswith("test_"):
        return True
    return None


if ENABLED:
    os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")  # else vLLM keeps one of the 2 cores idle
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")        # GiB of KV cache
    os.environ.setdefault("VLLM_CACHE_ROOT", str(REPO / ".cache" / "vllm"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
