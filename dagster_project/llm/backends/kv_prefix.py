"""Prompt-prefix reuse across interleaved calls: llama-cpp-python reuses the KV cache only for the prefix a prompt
shares with the one just before it, so a dialogue's next turn, sent after other dialogues' turns, re-reads its
whole history. `PrefixStates` keeps the KV state of earlier prompts (one sequence, no logits) up to a byte budget;
`PrefixReuseLlama` restores the one sharing the longest prefix with a new prompt before llama.cpp's own prefix
check, so only the new suffix is evaluated (prompt processing was over half the embedded model's time on 2 cores).
Replies are the same as from a fresh context: only KV computed in batched prompt passes is ever reused.
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
from llama_cpp import llama_cpp as lib

from dagster_project.llm.backends.lazy_grammar import LazyGrammarLlama

Buffer = bytes | ctypes.Array  # a sequence state as llama.cpp wrote it (`len` is its size in bytes)
MIN_GAIN = 16  # restore a state only when it saves at least this many prompt tokens over the live context


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of two token arrays."""
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


class PrefixStates:
    """KV states keyed by the tokens they hold, least recently used dropped first beyond `max_bytes`; a state
    whose tokens are a prefix of a newer one's is dropped (the newer one serves every prompt it would)."""

    def __init__(self, max_bytes: int):
        self.max_bytes, self.used = max_bytes, 0
        self._states: OrderedDict[bytes, tuple[np.ndarray, Buffer]] = OrderedDict()
        self.restored = self.saved_tokens = 0

    def __len__(self) -> int:
        return len(self._states)

    def longest(self, tokens: np.ndarray) -> tuple[np.ndarray, Buffer, int] | None:
        """The state sharing the longest prefix with `tokens` (its tokens, data, shared length), or None."""
        best, best_n = None, 0
        for key, (toks, data) in self._states.items():
            n = common_prefix(toks, tokens)
            if n > best_n:
                best, best_n = key, n
        if best is None:
            return None
        self._states.move_to_end(best)
        toks, data = self._states[best]
        return toks, data, best_n

    def add(self, tokens: np.ndarray, data: Buffer) -> None:
        if len(data) > self.max_bytes:
            return
        for key, (toks, old) in list(self._states.items()):
            if len(toks) <= len(tokens) and common_prefix(toks, tokens) == len(toks):
                del self._states[key]
                self.used -= len(old)
        key = tokens.tobytes()
        if key in self._states:
            self.used -= len(self._states.pop(key)[1])
        self._states[key] = (tokens, data)
        self.used += len(data)
        while self.used > self.max_bytes:
            self.used -= len(self._states.popitem(last=False)[1][1])


class PrefixReuseLlama(LazyGrammarLlama):
    """LazyGrammarLlama that remembers the KV state after each completion (`remember`) and, before generating,
    restores the remembered state sharing the longest prefix with the prompt when it beats the live context."""

    def __init__(self, *args: Any, prefix_cache_bytes: int = 256 << 20, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.prefixes = PrefixStates(prefix_cache_bytes)
        self._prompt_len = 0
        self._threads = self._want_threads = self.n_threads

    def generate(self, tokens: Sequence[int], *args: Any, **kwargs: Any) -> Any:
        self._prompt_len = len(tokens)
        if self.prefixes.max_bytes:
            self._restore(np.asarray(tokens, dtype=np.intc))
        return super().generate(tokens, *args, **kwargs)

    def use_threads(self, n: int) -> None:
        """Decode and evaluate prompts on `n` threads from the next decode on. Another thread may call it while this
        context generates: the generating thread applies it (`eval`). The thread count never changes a reply."""
        self._want_threads = n

    def eval(self, tokens: Sequence[int]) -> None:
        if self._want_threads != self._threads:
            lib.llama_set_n_threads(self.ctx, self._want_threads, self._want_threads)
            self._threads = self._want_threads
        super().eval(tokens)

    def remember(self) -> None:
        """Keep the KV state of the last prompt (call after a completion). The reply's tokens are dropped from the
        context first: decoded one at a time, their KV differs in the last bits from the batched prompt pass a
        fresh context gives the same text, and on a 135M model that flips later greedy tokens."""
        n = min(self._prompt_len, self.n_tokens)
        if n < self.n_tokens:
            if not self._ctx.kv_cache_seq_rm(-1, n, -1):
                return  # a model whose context cannot be cut (recurrent): nothing kept
            self.n_tokens = n
            # the context's logits are now the reply's, not the prompt's: the same prompt sent next (a job's next
            # sample) must replay its last token, or llama-cpp-python samples its first token from stale logits
            self._requires_eval = True
        if not self.prefixes.max_bytes or self.n_tokens == 0:
            return
        size = lib.llama_state_seq_get_size(self.ctx, 0)
        buf = (ctypes.c_uint8 * size)()  # kept as is: llama.cpp reads it back on restore, no copy either way
        if lib.llama_state_seq_get_data(self.ctx, buf, size, 0) == size:
            self.prefixes.add(self.input_ids[: self.n_tokens].copy(), buf)

    def _restore(self, tokens: np.ndarray) -> None:
        live = common_prefix(self.input_ids[: self.n_tokens], tokens)
        found = self.prefixes.longest(tokens)
        if found is None or found[2] < live + MIN_GAIN:
            return
        toks, data, shared = found
        self._ctx.kv_cache_clear()
        if lib.llama_state_seq_set_data(self.ctx, data, len(data), 0) != len(data):
            self.reset()  # nothing reused: llama.cpp evaluates the whole prompt
            self._ctx.kv_cache_clear()
            return
        self.input_ids[: len(toks)] = toks
        self.n_tokens = len(toks)
        self._requires_eval = True
        self.prefixes.restored += 1
        self.prefixes.saved_tokens += shared - live


def interleaved_dialogues(llm: PrefixReuseLlama, system: str, said: Sequence[str], dialogues: int, turns: int,
                          max_tokens: int = 24, fresh: bool = False) -> tuple[list[str], int]:
    """Greedy replies of `dialogues` chats advanced one turn at a time across all of them, as the evaluation sends
    them (the workload prefix reuse is for), and the prompt tokens sent; `fresh`: each call starts from an empty
    context (nothing reused)."""
    history = [[{"role": "system", "content": system}] for _ in range(dialogues)]
    out: list[str] = []
    prompt_tokens = 0
    for turn in range(turns):
        for d, h in enumerate(history):
            h.append({"role": "user", "content": f"({d}) {said[turn % len(said)]}"})
            if fresh:
                llm.reset()
            r = llm.create_chat_completion(messages=list(h), max_tokens=max_tokens, temperature=0.0)
            llm.remember()
            out.append(r["choices"][0]["message"]["content"])
            prompt_tokens += r["usage"]["prompt_tokens"]
            h.append({"role": "assistant", "content": out[-1]})
    return out, prompt_tokens
