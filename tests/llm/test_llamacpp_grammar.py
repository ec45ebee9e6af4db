"""The embedded llama.cpp backend (real SmolLM2-135M on CPU): compact JSON grammars, truncation reported."""

from __future__ import annotations

import json
import re

import pytest

from dagster_project.config import RoleConfig
from dagster_project.llm.backends.base import Job
from dagster_project.llm.backends.llamacpp import LlamaCppBackend, compact_grammar

pytest.importorskip("llama_cpp")
SCHEMA = {"type": "object", "properties": {"action": {"type": "string", "enum": ["answer", "clarify"]}},
          "required": ["action"]}
MESSAGES = ({"role": "user", "content": "Should you ask a clarifying question about 'bank'? Reply in JSON."},)
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')


@pytest.fixture(scope="module")
def backend():
    return LlamaCppBackend(RoleConfig(n_ctx=256, n_threads=2))


def test_grammar_leaves_no_free_whitespace_between_json_tokens():
    gbnf = compact_grammar(json.dumps({**SCHEMA, "properties": {**SCHEMA["properties"], "n": {"type": "integer"}}}))
    assert re.search(r'^space ::= ""$', gbnf, re.MULTILINE)
    assert '" "?' not in gbnf and "\\n" not in gbnf.split("char ::=")[0]


def test_sampled_json_is_compact_and_a_cut_off_sample_is_flagged(backend):
    out = backend.generate([
        Job(MESSAGES, {"temperature": 1.0, "top_p": 1.0, "max_tokens": 16, "seed": 0}, [0, 1], SCHEMA),
        Job(MESSAGES, {"temperature": 1.0, "top_p": 1.0, "max_tokens": 2, "seed": 0}, [0], SCHEMA),
    ])
    whole, cut = out
    assert whole.error is None and whole.truncated == [False] * 2
    for text in whole.texts:
        assert json.loads(text)["action"] in ("answer", "clarify")
        assert not re.search(r"\s", _STRINGS.sub("", text)), text  # no whitespace outside strings
    assert cut.error is None and cut.truncated == [True]


RICH = {"type": "object", "properties": {"query": {"type": "string"}, "missing_info": {"type": "array",
        "items": {"type": "string"}}, "n": {"type": "integer"}, "ok": {"type": "boolean"}},
        "required": ["query", "missing_info", "n", "ok"]}


def test_lazy_grammar_picks_the_tokens_the_full_grammar_picks():
    """Checking the likely tokens first changes no token: greedy and sampled, the same text as llama-cpp-python's
    own grammar sampler, while steps where enough likely tokens are allowed skip the full-vocabulary check."""
    from llama_cpp import Llama

    from dagster_project.llm.backends.lazy_grammar import LazyGrammarLlama
    from dagster_project.llm.backends.llamacpp import grammar_kwargs, resolve_gguf

    path = str(resolve_gguf("smollm2-135m-instruct"))
    plain, lazy = (cls(model_path=path, n_ctx=512, verbose=False, n_threads=2, seed=0)
                   for cls in (Llama, LazyGrammarLlama))
    messages = [{"role": "user", "content": "Write an ambiguous travel request and what is missing, as JSON."}]
    steps = full = 0
    for temperature, seed in ((0.0, 0), (0.7, 1), (1.0, 2)):
        kw = {"messages": messages, "max_tokens": 48, "temperature": temperature, "top_p": 0.95, "seed": seed}
        want = plain.create_chat_completion(**kw, **grammar_kwargs(RICH))["choices"][0]["message"]["content"]
        got = lazy.create_chat_completion(**kw, **grammar_kwargs(RICH))["choices"][0]["message"]["content"]
        assert got == want, (temperature, want, got)
        steps, full = steps + lazy.last_grammar.steps, full + lazy.last_grammar.full_checks
    assert 0 < full < steps, (steps, full)
    free = lazy.create_chat_completion(messages=messages, max_tokens=8, temperature=0.0)  # no grammar: no wrapper
    assert free["choices"][0]["message"]["content"]
    for llm in (plain, lazy):  # their threads and memory go now, not whenever the collector finds them
        llm.close()
