"""Prompt-prefix reuse in the embedded llama.cpp backend: the state store, and on the real SmolLM2-135M that
interleaved dialogues give the same replies with far fewer prompt tokens evaluated; the Q8_0 re-encoding."""

from __future__ import annotations

import numpy as np
import pytest

from dagster_project.config import RoleConfig
from dagster_project.llm.backends.kv_prefix import PrefixStates, common_prefix, interleaved_dialogues
from dagster_project.llm.identity import _gguf_path, cache_identity


def toks(*ids: int) -> np.ndarray:
    return np.array(ids, dtype=np.intc)


def test_common_prefix():
    assert common_prefix(toks(1, 2, 3), toks(1, 2, 4, 5)) == 2
    assert common_prefix(toks(1, 2), toks(1, 2, 3)) == 2
    assert common_prefix(toks(9), toks(1)) == 0


def test_store_returns_the_longest_shared_prefix_and_drops_superseded_and_old_states():
    store = PrefixStates(max_bytes=30)
    store.add(toks(1, 2, 3), b"a" * 10)
    store.add(toks(1, 2, 3, 4, 5), b"b" * 10)  # extends the first: the first is dropped
    assert len(store) == 1 and store.used == 10
    store.add(toks(7, 8), b"c" * 10)
    got = store.longest(toks(1, 2, 3, 9))
    assert got is not None and got[1] == b"b" * 10 and got[2] == 3
    assert store.longest(toks(4, 4)) is None
    store.add(toks(6), b"d" * 10)
    store.add(toks(5), b"e" * 10)  # over 30 bytes: the least recently used (7, 8) goes, not the one just read
    assert store.used == 30 and store.longest(toks(7, 8)) is None and store.longest(toks(1, 2)) is not None
    store.add(toks(0), b"f" * 31)  # larger than the whole budget: not kept
    assert store.used == 30 and store.longest(toks(0)) is None


llama_cpp = pytest.importorskip("llama_cpp")


def _dialogues(cache_mb: int, fresh: bool = False) -> tuple[list[str], int, int]:
    """Four dialogues advanced turn by turn, interleaved as the evaluation sends them; `fresh`: every call starts
    from an empty context (the reference: nothing reused). -> replies, prompt tokens, tokens not re-read."""
    from dagster_project.llm.backends.llamacpp import LlamaCppBackend

    backend = LlamaCppBackend(RoleConfig(n_ctx=1024, n_threads=2, quantize="q8_0", prefix_cache_mb=cache_mb))
    system = "You ask one clarifying question when a request is ambiguous and answer it otherwise. " * 4
    said = ["I want to plan a trip.", "Somewhere warm, in spring.", "Two people, about a week."]
    texts, prompt_tokens = interleaved_dialogues(backend.llms[0], system, said, dialogues=4, turns=3, fresh=fresh)
    saved = backend.llms[0].prefixes.saved_tokens
    backend.llms[0].close()
    return texts, prompt_tokens, saved


def test_interleaved_dialogues_reuse_their_own_history_and_reply_as_from_a_fresh_context():
    """The reply tokens' KV (decoded one at a time) is never reused: with it, 12 of 24 greedy replies differed."""
    reference, tokens, _ = _dialogues(0, fresh=True)
    plain, _, saved_plain = _dialogues(0)
    reused, tokens_again, saved = _dialogues(64)
    assert reused == plain == reference and tokens_again == tokens
    assert saved_plain == 0 and saved > tokens // 10  # each dialogue's earlier turns are not read again


def test_q8_0_reencoding_is_made_once_and_has_its_own_cache_identity():
    _gguf_path.cache_clear()
    q8 = _gguf_path("smollm2-135m-instruct", "q8_0")
    mtime = q8.stat().st_mtime_ns
    _gguf_path.cache_clear()
    assert _gguf_path("smollm2-135m-instruct", "q8_0") == q8 and q8.stat().st_mtime_ns == mtime
    plain, q = cache_identity(RoleConfig()), cache_identity(RoleConfig(quantize="q8_0"))
    assert plain["model_file"] != q["model_file"] and plain["model"] == q["model"]


CLARIFY_SCHEMA = {"type": "object", "properties": {"clarify": {"type": "boolean"}, "question": {"type": "string"}},
                  "required": ["clarify", "question"]}


@pytest.mark.parametrize("temperature, schema", [(0.0, None), (0.8, CLARIFY_SCHEMA)], ids=["greedy", "sampled_json"])
def test_a_jobs_next_sample_starts_from_the_prompt_not_from_the_last_reply(temperature, schema):
    """A job's samples send one prompt several times in a row to one context. `remember` cuts the reply from the
    context, so llama-cpp-python took the prompt as fully evaluated and drew the next sample's first token from
    the last reply token's logits (greedy: ',' or '.' then a drifting reply; sampled JSON, as majority vote and
    Intent-Sim ask: other replies, once the opposite `clarify`). Each sample must equal a fresh context's."""
    from dagster_project.llm.backends.base import Job
    from dagster_project.llm.backends.llamacpp import LlamaCppBackend

    messages = ({"role": "system", "content": "Ask a clarifying question when a request is ambiguous."},
                {"role": "user", "content": "Tell me about the jaguar, how fast it goes and its best year."})
    sampling = {"temperature": temperature, "top_p": 0.95, "max_tokens": 32, "seed": 0}

    def replies(indices: list[int]) -> list[str]:
        backend = LlamaCppBackend(RoleConfig(n_ctx=1024, n_threads=2, parallel=1, quantize="q8_0"))
        texts = backend.generate([Job(messages, sampling, indices, schema)])[0].texts
        backend.llms[0].close()
        return texts

    together = replies([0, 1, 2])
    assert together == [replies([i])[0] for i in range(3)]
    assert len(set(together)) == (1 if temperature == 0 else 3)  # the seeds still matter when sampling
