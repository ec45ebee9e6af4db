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
