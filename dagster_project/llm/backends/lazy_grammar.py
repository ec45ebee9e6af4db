"""Grammar-constrained sampling at the cost of the likely tokens: llama.cpp's grammar sampler checks every token of the
vocabulary (49,152 for SmolLM2) at every step, which halves generation speed on 2 cores (benchmarks/bench_backends.py).

`LazyGrammar` checks the `top_n` most likely tokens first. Whenever enough of them are allowed (`keep`: top_k of
them when sampling, one when greedy) the sampler chain picks exactly the token the full check would give, since
every allowed token outside them is less likely than each of them; otherwise it checks the whole vocabulary.
"""

from __future__ import annotations

import ctypes
import inspect
import weakref
from typing import Any

import numpy as np
from llama_cpp import Llama, LlamaGrammar
from llama_cpp import llama_cpp as lib
from llama_cpp._internals import LlamaSampler

TOP_N = 256  # tokens checked first: a JSON string allows most of them, a structural step (`",`, `}`) few


def _records(data: Any, n: int) -> np.ndarray:
    """A numpy view (id, logit, p) of n llama_token_data structs."""
    return np.ctypeslib.as_array(ctypes.cast(data, ctypes.POINTER(lib.llama_token_data)), shape=(n,))


class LazyGrammar:
    """A llama.cpp sampler wrapping the grammar sampler of `grammar`; counts its steps and full-vocabulary checks."""

    def __init__(self, model: Any, grammar: LlamaGrammar, keep: int, top_n: int = TOP_N):
        self.grammar = lib.llama_sampler_init_grammar(model.vocab, grammar._grammar.encode("utf-8"),
                                                      grammar._root.encode("utf-8"))
        if not self.grammar:
            raise ValueError("llama.cpp rejected the grammar")
        weakref.finalize(self, lib.llama_sampler_free, self.grammar)
        self.keep, self.top_n, self.steps, self.full_checks = keep, top_n, 0, 0
        self._buf = (lib.llama_token_data * top_n)()
        self._small = lib.llama_token_data_array(data=self._buf, size=top_n, selected=-1, sorted=False)
        self._small_view = _records(self._buf, top_n)
        self._callbacks = (lib.llama_sampler_i_apply(self._apply), lib.llama_sampler_i_accept(self._accept),
                           lib.llama_sampler_i_reset(self._reset))
        self._iface = lib.llama_sampler_i()
        self._iface.apply, self._iface.accept, self._iface.reset = self._callbacks
        self._iface.name = lib.llama_sampler_i_name(0)
        self._iface.clone = lib.llama_sampler_i_clone(0)
        self._iface.free = lib.llama_sampler_i_free(0)  # the chain never frees it: LlamaSampler removes it first
        self.sampler = lib.llama_sampler(iface=ctypes.pointer(self._iface), ctx=None)

    def _apply(self, _smpl: Any, cur_p: Any) -> None:
        arr = cur_p.contents
        self.steps += 1
        if arr.size <= self.top_n:
            self._full(cur_p)
            return
        full = _records(arr.data, arr.size)
        top = np.argpartition(full["logit"], -self.top_n)[-self.top_n:]
        small = self._small_view
        small[:] = full[top]
        self._small.size, self._small.selected, self._small.sorted = self.top_n, -1, False
        lib.llama_sampler_apply(self.grammar, ctypes.byref(self._small))
        if np.isfinite(small["logit"]).sum() < self.keep:
            self._full(cur_p)
            return
        logits = full["logit"]
        logits[:] = -np.inf
        logits[top] = small["logit"]

    def _full(self, cur_p: Any) -> None:
        self.full_checks += 1
        lib.llama_sampler_apply(self.grammar, cur_p)

    def _accept(self, _smpl: Any, token: int) -> None:
        lib.llama_sampler_accept(self.grammar, token)

    def _reset(self, _smpl: Any) -> None:
        lib.llama_sampler_reset(self.grammar)


_INIT_SAMPLER = inspect.signature(Llama._init_sampler)


def _move(source: LlamaSampler, target: LlamaSampler, count: int) -> None:
    """Move the first `count` samplers of `source`'s chain to the end of `target`'s (ownership moves too)."""
    for _ in range(count):
        lib.llama_sampler_chain_add(target.sampler, lib.llama_sampler_chain_remove(source.sampler, 0))


class LazyGrammarLlama(Llama):
    """llama_cpp.Llama whose grammar-constrained generations use `LazyGrammar`; the last one is `last_grammar`."""

    last_grammar: LazyGrammar | None = None

    def _init_sampler(self, *args: Any, **kwargs: Any) -> LlamaSampler:
        bound = _INIT_SAMPLER.bind(self, *args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        keep = 1 if a["temp"] == 0.0 else a["top_k"] if a["top_k"] > 0 and a["temp"] > 0.0 else 0
        if a["grammar"] is None or a["logits_processor"] is not None or a["mirostat_mode"] or not keep:
            return super()._init_sampler(*args, **kwargs)
        plain = super()._init_sampler(**{**{k: v for k, v in a.items() if k != "self"}, "grammar": None})
        chain, lazy = LlamaSampler(), LazyGrammar(self._model, a["grammar"], keep)
        _move(plain, chain, 1)  # the penalties first, as in Llama._init_sampler, then the grammar, then the rest
        lib.llama_sampler_chain_add(chain.sampler, ctypes.pointer(lazy.sampler))
        chain.custom_samplers.append((lib.llama_sampler_chain_n(chain.sampler) - 1, lazy))
        _move(plain, chain, lib.llama_sampler_chain_n(plain.sampler))
        self.last_grammar = lazy
        return chain
