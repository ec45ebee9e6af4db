"""Benchmark 1: the LLM response cache end to end through LLMClient on the embedded llama.cpp SmolLM2."""

from __future__ import annotations

import tempfile
from pathlib import Path

from _common import BenchResult, ratio, say, timer

from dagster_project.llm.chat import ChatRequest
from dagster_project.config import LLMConfig, RoleConfig
from dagster_project.llm.task import parse_json_object

PROMPTS = (
    "What is the capital of France?",
    "Name a fruit that is yellow.",
    "How many legs does a spider have?",
    "Give me a synonym for happy.",
    "What colour is the sky on a clear day?",
    "Suggest a name for a pet goldfish.",
    "What is 12 times 12?",
    "Which planet is closest to the sun?",
    "Recommend a good book for a long flight.",
    "How do I boil an egg?",
    "What language is spoken in Brazil?",
    "Can you book me a table for tonight?",
)

DECISION_SCHEMA = {
    "type": "object",
    "properties": {"action": {"type": "string", "enum": ["answer", "clarify"]},
                   "text": {"type": "string", "maxLength": 60}},
    "required": ["action", "text"],
}


def _requests(max_tokens: int, schema: dict | None = None) -> list[ChatRequest]:
    return [ChatRequest.of([{"role": "user", "content": p}], prompt_version="bench-v1", json_schema=schema,
                           temperature=0.0, max_tokens=max_tokens) for p in PROMPTS]


def bench_llm(max_tokens: int = 24, schema_max_tokens: int = 48) -> BenchResult:
    from dagster_project.llm.client import LLMClient

    res = BenchResult("llm")
    with tempfile.TemporaryDirectory(prefix="bench_llm_") as d:
        cfg = LLMConfig(cache_path=str(Path(d) / "llm_cache.sqlite"),
                        roles={"default": RoleConfig(backend="llamacpp", model="smollm2-135m-instruct")})
        client = LLMClient(cfg)
        say("llm: loading SmolLM2 (llama.cpp) + one warm-up request")
        with timer() as t_load:  # model load is paid once per process; kept out of the per-pass timings
            warm = client.chat("generator", [ChatRequest.of([{"role": "user", "content": "Say hi."}],
                                                            temperature=0.0, max_tokens=4)])
        if warm[0].error:
            raise RuntimeError(f"llama.cpp backend failed: {warm[0].error}")

        reqs = _requests(max_tokens)
        say(f"llm: {len(reqs)} requests, uncached (fresh cache)")
        with timer() as t_cold:
            cold = client.chat("generator", reqs)
        say(f"llm: same {len(reqs)} requests again (cache hits)")
        with timer() as t_hot:
            hot = client.chat("generator", reqs)
        errors = sum(1 for r in cold if r.error)
        assert all(r.cached for r in hot) and [r.text for r in hot] == [r.text for r in cold], "cache mismatch"
        tok_out = sum(r.tokens_out for r in cold)
        tok_in = sum(r.tokens_in for r in cold)

        s_reqs = _requests(schema_max_tokens, DECISION_SCHEMA)
        say(f"llm: {len(s_reqs)} JSON-schema constrained requests, uncached")
        with timer() as t_schema:
            constrained = client.chat("generator", s_reqs)
        s_tok_out = sum(r.tokens_out for r in constrained)
        s_valid = sum(1 for r in constrained if not r.error and parse_json_object(r.text)[0] is not None)

    n = len(reqs)
    res.add("model_load_s", t_load[0], "model load + 1 warm-up request", "s")
    res.add("uncached_s", t_cold[0], f"{n} requests, uncached", "s",
            note=f"max_tokens={max_tokens}, T=0, {errors} errors")
    res.add("cached_s", t_hot[0], f"{n} requests, cached", "s")
    res.add("cache_speedup", ratio(t_cold[0], t_hot[0]), "uncached / cached wall time", "x")
    res.add("uncached_ms_per_request", 1000 * t_cold[0] / n, "uncached latency per request", "ms")
    res.add("cached_ms_per_request", 1000 * t_hot[0] / n, "cached latency per request", "ms")
    res.add("tokens_in", tok_in, "prompt tokens (uncached pass)")
    res.add("tokens_out", tok_out, "generated tokens (uncached pass)")
    res.add("gen_tokens_per_s", tok_out / t_cold[0], "generated tokens / uncached wall time", "tok/s",
            note="wall time includes prompt processing")
    res.add("schema_s", t_schema[0], f"{n} JSON-schema requests, uncached", "s",
            note=f"max_tokens={schema_max_tokens}, {s_valid}/{n} parse as JSON objects")
    res.add("schema_tokens_out", s_tok_out, "generated tokens (JSON-schema pass)")
    res.add("schema_tokens_per_s", s_tok_out / t_schema[0], "JSON-schema generated tokens / wall time", "tok/s",
            note="includes grammar build per request")
    res.add("schema_vs_free_tok_per_s_ratio", ratio(s_tok_out / t_schema[0], tok_out / t_cold[0]),
            "JSON-schema tok/s / free-text tok/s", "x")
    return res
