"""What llama.cpp's multi-sequence batches would give the embedded backend: raw decode tokens/s of today's layout
(two contexts of one thread, one sequence each, side by side: RoleConfig.parallel) against one context on both
threads decoding k sequences per llama_decode. Forced tokens, no sampling: the decode alone."""

from __future__ import annotations

import threading
import time
from typing import Any

from _common import BenchResult, ratio

PROMPT = ("You are a helpful assistant. Decide whether the user's request is ambiguous and, if so, ask one "
          "clarifying question about the missing detail. ") * 6


def _context(model: Any, threads: int, sequences: int) -> Any:
    from llama_cpp import llama_cpp as lib

    p = lib.llama_context_default_params()
    p.n_ctx, p.n_batch, p.n_ubatch, p.n_seq_max, p.kv_unified = 4096, 512, 512, sequences, True
    p.n_threads = p.n_threads_batch = threads
    ctx = lib.llama_init_from_model(model, p)
    if not ctx:
        raise RuntimeError("llama.cpp could not create the context")
    return ctx


def _decode_s(ctx: Any, prompt: list[int], sequences: int, steps: int) -> float:
    """Seconds for `steps` decodes of one token per sequence, after the prompt is evaluated once and copied to
    every sequence (the prompt pass is not timed)."""
    from llama_cpp import llama_cpp as lib

    mem = lib.llama_get_memory(ctx)
    lib.llama_memory_clear(mem, True)
    batch = lib.llama_batch_init(max(len(prompt), sequences), 0, sequences)
    try:
        n = batch.n_tokens = len(prompt)
        for i, tok in enumerate(prompt):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = tok, i, 1, i == n - 1
            batch.seq_id[i][0] = 0
        if lib.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed on the prompt")
        for s in range(1, sequences):
            lib.llama_memory_seq_cp(mem, 0, s, -1, -1)
        start = time.perf_counter()
        for step in range(steps):
            batch.n_tokens = sequences
            for s in range(sequences):
                batch.token[s], batch.pos[s], batch.n_seq_id[s], batch.logits[s] = 42 + s + step, n + step, 1, True
                batch.seq_id[s][0] = s
            if lib.llama_decode(ctx, batch) != 0:
                raise RuntimeError("llama_decode failed")
        return time.perf_counter() - start
    finally:
        lib.llama_batch_free(batch)


def multi_sequence(res: BenchResult, steps: int = 96, widths: tuple[int, ...] = (8, 16)) -> None:
    """Adds `multiseq_two_contexts_tok_s` and, per width k, `multiseq_<k>_tok_s` and its ratio to today's layout."""
    from llama_cpp import Llama
    from llama_cpp import llama_cpp as lib

    from dagster_project.llm.backends.llamacpp import gguf_to_load

    llm = Llama(model_path=str(gguf_to_load("smollm2-135m-instruct", "q8_0")), n_ctx=512, n_threads=2, verbose=False)
    model, prompt = llm._model.model, llm.tokenize(PROMPT.encode())
    pair = [_context(model, 1, 1), _context(model, 1, 1)]
    seconds = [0.0, 0.0]

    def one(i: int) -> None:
        seconds[i] = _decode_s(pair[i], prompt, 1, steps)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    two = 2 * steps / max(seconds)
    res.add("multiseq_two_contexts_tok_s", two, "decode: 2 contexts x 1 thread, 1 sequence each", "tok/s",
            note=f"today's layout; {steps} forced tokens after a {len(prompt)}-token prompt")
    for ctx in pair:
        lib.llama_free(ctx)
    for k in widths:
        ctx = _context(model, 2, k)
        tok_s = k * steps / _decode_s(ctx, prompt, k, steps)
        lib.llama_free(ctx)
        res.add(f"multiseq_{k}_tok_s", tok_s, f"decode: 1 context x 2 threads, {k} sequences per decode", "tok/s",
                note=f"{ratio(tok_s, two):.2f}x today's layout")
    llm.close()
