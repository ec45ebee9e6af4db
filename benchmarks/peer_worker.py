"""One peer framework sends N free-text chat requests to an OpenAI-compatible server; run inside `.venv-peers`.

    .venv-peers/bin/python benchmarks/peer_worker.py PEER BASE_URL N [CONCURRENCY] [CACHE_DIR]

PEER is `distilabel` (a Pipeline: LoadDataFromDicts >> TextGeneration with OpenAILLM, input_batch_size =
CONCURRENCY, the batch's requests in flight together), `curator-openai` or `curator-litellm` (curator.LLM
with that backend, max_concurrent_requests = CONCURRENCY, rate limits far above what the run needs). Caches go
to CACHE_DIR (a temp folder by default) and are off where the peer allows it, so every prompt is sent. Prints
one line `PEER_JSON {...}`: rows answered, wall and CPU time of the run (imports excluded, reaped children
included), own peak RSS. Stdlib and the peer only: the project's venv is not on the path here.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from importlib.metadata import version
from importlib.util import find_spec
from typing import Any

PEERS = ("distilabel", "curator-openai", "curator-litellm")
MAX_TOKENS = 64
TOPICS = ("rivers", "bridges", "volcanoes", "libraries", "orchards", "harbors", "glaciers", "lanterns")


def prompts(n: int) -> list[str]:
    """n distinct user prompts (distinct so that no peer can answer one from another)."""
    return [f"Request {i}: in two sentences, what should a visitor know about {TOPICS[i % len(TOPICS)]}?"
            for i in range(n)]


def tiktoken_files() -> str:
    """litellm's bundled tiktoken files: curator counts tokens with cl100k_base, which tiktoken would download."""
    spec = find_spec("litellm")
    roots = list(spec.submodule_search_locations or []) if spec else []
    return os.path.join(roots[0], "litellm_core_utils", "tokenizers") if roots else ""


def cpu_s() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def peak_rss_mb() -> float:
    """VmHWM of this process in MiB (its own high-water mark; see benchmarks/_common.peak_rss_mb)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def run_distilabel(base_url: str, texts: list[str], concurrency: int, cache: str) -> list[Any]:
    from distilabel.models import OpenAILLM
    from distilabel.pipeline import Pipeline
    from distilabel.steps import LoadDataFromDicts
    from distilabel.steps.tasks import TextGeneration

    with Pipeline(name="peer-bench", cache_dir=cache) as pipeline:
        load = LoadDataFromDicts(data=[{"instruction": t} for t in texts], batch_size=max(concurrency, 256))
        llm = OpenAILLM(model="stub-peer", base_url=base_url, api_key="stub-key", max_retries=0, timeout=60,
                        generation_kwargs={"max_new_tokens": MAX_TOKENS, "temperature": 0.0})
        generate = TextGeneration(llm=llm, input_batch_size=concurrency)
        load >> generate
    distiset = pipeline.run(use_cache=False)
    return list(distiset["default"]["train"]["generation"])


def run_curator(backend: str, base_url: str, texts: list[str], concurrency: int, cache: str) -> list[Any]:
    os.environ["CURATOR_CACHE_DIR"] = cache  # read at call time
    from bespokelabs import curator

    class Answer(curator.LLM):
        """Free text: the prompt column in, the reply out."""

        def prompt(self, row: dict[str, Any]) -> str:
            return row["instruction"]

        def parse(self, row: dict[str, Any], response: str) -> dict[str, Any]:
            return {"generation": response}

    model = "stub-peer" if backend == "openai" else "openai/stub-peer"  # litellm routes by the provider prefix
    llm = Answer(model_name=model, backend=backend, generation_params={"max_tokens": MAX_TOKENS, "temperature": 0.0},
                 backend_params={"base_url": base_url, "api_key": "stub-key", "max_retries": 0,
                                 "require_all_responses": False, "max_concurrent_requests": concurrency,
                                 "max_requests_per_minute": 10**9, "max_tokens_per_minute": 10**12})
    out = llm([{"instruction": t} for t in texts])
    dataset = getattr(out, "dataset", out)
    return list(dataset["generation"])


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] not in PEERS:
        print(__doc__, file=sys.stderr)
        return 2
    peer, base_url, n = argv[0], argv[1], int(argv[2])
    concurrency = int(argv[3]) if len(argv) > 3 else 16
    cache = argv[4] if len(argv) > 4 else tempfile.mkdtemp(prefix="peer_cache_")
    # no telemetry, no cache reuse, no rich live display; set before the peer is imported
    os.environ.update({"TELEMETRY_ENABLED": "false", "CURATOR_DISABLE_CACHE": "true",
                       "CURATOR_DISABLE_RICH_DISPLAY": "1", "DISTILABEL_CACHE_DIR": cache,
                       "DISTILABEL_LOG_LEVEL": "WARNING", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                       "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                       # litellm reads the key from the env only; the stub accepts any
                       "OPENAI_API_KEY": "stub-key", "TIKTOKEN_CACHE_DIR": tiktoken_files()})
    texts = prompts(n)
    t = time.perf_counter()
    if peer == "distilabel":
        import distilabel.models  # noqa: F401 - imports are timed apart from the run
        import distilabel.pipeline  # noqa: F401
    else:
        import bespokelabs.curator  # noqa: F401
    import_s = time.perf_counter() - t
    cpu0, t0 = cpu_s(), time.perf_counter()
    if peer == "distilabel":
        replies = run_distilabel(base_url, texts, concurrency, cache)
    else:
        replies = run_curator(peer.split("-", 1)[1], base_url, texts, concurrency, cache)
    wall = time.perf_counter() - t0
    package = "distilabel" if peer == "distilabel" else "bespokelabs-curator"
    answered = sum(1 for r in replies if isinstance(r, str) and r.strip())
    print("PEER_JSON " + json.dumps({
        "peer": peer, "version": version(package), "prompts": n, "rows": len(replies), "answered": answered,
        "concurrency": concurrency, "import_s": round(import_s, 3), "wall_s": round(wall, 3),
        "cpu_s": round(cpu_s() - cpu0, 3), "peak_rss_mb": round(peak_rss_mb(), 1)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
