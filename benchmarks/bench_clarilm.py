"""ClariLM scale benchmark: question dedup at 10k / 50k / 124k rows, and the log prefilter / reader on a
generated multi-million-turn log. Prints time, throughput, peak memory and the ratios between sizes.

    .venv/bin/python benchmarks/bench_clarilm.py                  # all parts (a few minutes on 2 cores)
    .venv/bin/python benchmarks/bench_clarilm.py --dedup 10000,50000 --turns 200000,2000000

Dedup runs the real `semantic_dedup` (exact + blocked cosine + connected components) on template questions
with unit vectors planted so ~1% are near-duplicates: the MiniLM encode step is measured separately on a
sample (sentences/s) and projected, because on a CPU it dominates and does not depend on the dedup code.
Peak memory is the process's peak resident memory above the start of each call, sampled every 5 ms: it
includes numpy buffers and polars' Rust allocations; memory freed earlier and reused is not counted again.
No timing assertions anywhere; numbers go to stdout and benchmarks/results/clarilm.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import math
import os
import sys
import tempfile
import threading
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import psutil  # noqa: E402 - installed with dagster
import polars as pl  # noqa: E402
from _common import fmt_num, ratio, say, timer  # noqa: E402
from bench_dedup import make_questions, planted_vectors  # noqa: E402

from dagster_project.core.shared.dedup import semantic_dedup  # noqa: E402
from dagster_project.config import LogsConfig  # noqa: E402
from dagster_project.core.clarilm.logs import load_logs, prefilter  # noqa: E402


def _measured(fn):
    """Wall time, and peak resident memory above the start, sampled every 5 ms by a thread.

    RSS sees numpy's and polars' (Rust) allocations, which tracemalloc does not, and sampling does not
    slow the measured code (tracemalloc made the Python-heavy log reader several times slower)."""
    gc.collect()
    proc = psutil.Process()
    base = peak = proc.memory_info().rss
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.005):
            peak = max(peak, proc.memory_info().rss)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    with timer() as t:
        out = fn()
    done.set()
    sampler.join()
    return out, t[0], max(peak, proc.memory_info().rss) - base


def bench_question_dedup(sizes: list[int], block: int, tau: float) -> dict[str, float]:
    out: dict[str, float] = {}
    for n in sizes:
        # unique texts (a row number), then 1% exact copies of other rows (after normalisation)
        texts = [f"{q} (case {i})" for i, q in enumerate(make_questions(n, seed=n))]
        rng = np.random.default_rng(n)
        for dst, src in rng.integers(0, n, size=(n // 100, 2)):
            texts[dst] = texts[src].upper()
        vecs, planted = planted_vectors(n, seed=n)
        # each text gets its row's vector: random (never similar) or a planted near-copy of another row
        lookup = {t: vecs[i] for i, t in enumerate(texts)}
        embed = lambda ts: np.stack([lookup[t] for t in ts])  # noqa: E731
        say(f"dedup: semantic_dedup on {n:,} questions (block {block})")
        res, secs, peak = _measured(lambda: semantic_dedup(texts, [1.0] * n, embed, tau, block))
        s = res.summary()
        out[f"dedup_{n}_s"] = secs
        out[f"dedup_{n}_ms_per_1k"] = 1000 * secs / (n / 1000)
        out[f"dedup_{n}_peak_mb"] = peak / 2**20
        out[f"dedup_{n}_removed"] = s["dedup_removed"]
        out[f"dedup_{n}_planted_pairs"] = planted
        print(f"dedup {n:>8,} questions: {secs:8.2f} s  {1000 * secs / (n / 1000):8.1f} ms per 1k  "
              f"peak {peak / 2**20:8.0f} MiB  removed {s['dedup_removed']:,} ({planted:,} planted near-copies)")
    for a, b in zip(sizes, sizes[1:]):
        f = b / a
        t = ratio(out[f"dedup_{b}_s"], out[f"dedup_{a}_s"])
        m = ratio(out[f"dedup_{b}_peak_mb"], out[f"dedup_{a}_peak_mb"])
        out[f"dedup_time_ratio_{a}_{b}"] = t
        print(f"  {a:,} -> {b:,} ({f:.1f}x rows): time x{t:.1f} (exponent {math.log(t) / math.log(f):.2f}; "
              f"O(n^2) = 2), peak memory x{m:.1f} (O(block x n) = 1)")
    return out


def bench_encode(n: int = 512) -> float:
    from dagster_project.llm.embedder import encode

    encode(make_questions(64, seed=1))  # load + warm up
    qs = make_questions(n, seed=2)
    with timer() as t:
        encode(qs)
    rate = n / t[0]
    print(f"MiniLM encode: {rate:,.0f} sentences/s -> 124k questions ~{124_000 / rate / 60:.1f} min on this CPU "
          f"(~1 s on a GPU, ARCHITECTURE §10)")
    return rate


ASSISTANT = ("Sure, here is how.", "Which city are you in?", "Could you tell me your budget?",
             "It is 42.", "Do you mean the country or the person?", "Here is a long answer. " * 30)
USER = ("How do I bake bread?", "Berlin.", "About 500 euros.", "Thanks!", "The country.", "Explain it again")


def synthetic_turns(n_turns: int, seed: int = 0) -> pl.DataFrame:
    """Vectorised: conversations of 2-8 turns, alternating user / assistant, texts from small pools."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, 9, size=n_turns // 2)
    lengths = lengths[np.cumsum(lengths) <= n_turns]
    conv = np.repeat(np.arange(len(lengths)), lengths)
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    turn = np.arange(len(conv)) - starts
    role = np.where(turn % 2 == 0, "user", "assistant")
    a = np.array(ASSISTANT)[rng.integers(0, len(ASSISTANT), len(conv))]
    u = np.array(USER)[rng.integers(0, len(USER), len(conv))]
    return pl.DataFrame({"conversation_id": pl.Series(conv).cast(pl.Utf8), "turn_index": turn, "role": role,
                         "text": np.where(role == "user", u, a), "source": "synthetic", "source_format": "wildchat",
                         "language": "English"}).with_columns(log_date=pl.lit(dt.date(2024, 5, 1)))


def bench_prefilter(sizes: list[int]) -> dict[str, float]:
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            path = Path(tmp) / f"turns_{n}.parquet"
            say(f"prefilter: generating {n:,} turns")
            synthetic_turns(n).write_parquet(path, row_group_size=100_000)
            real_n = pl.scan_parquet(path).select(pl.len()).collect().item()
            say(f"prefilter: scanning {real_n:,} turns (lazy, streaming engine)")
            res, secs, peak = _measured(lambda: prefilter(pl.scan_parquet(path), 300).collect(engine="streaming"))
            kept = int(res["kept"].sum())
            out[f"prefilter_{n}_turns_per_s"] = real_n / secs
            out[f"prefilter_{n}_pass_rate"] = kept / max(res.height, 1)
            out[f"prefilter_{n}_peak_mb"] = peak / 2**20
            print(f"prefilter {real_n:>10,} turns: {secs:7.2f} s  {real_n / secs:12,.0f} turns/s  "
                  f"candidates {kept:,} / {res.height:,} assistant turns (pass rate {kept / max(res.height, 1):.1%})  "
                  f"peak {peak / 2**20:6.0f} MiB")
    for a, b in zip(sizes, sizes[1:]):
        r = ratio(out[f"prefilter_{b}_turns_per_s"], out[f"prefilter_{a}_turns_per_s"])
        print(f"  {a:,} -> {b:,} turns: throughput x{r:.2f} (1.0 = linear)")
    return out


def bench_reader(n_conversations: int) -> dict[str, float]:
    """The JSONL reader with quarantine checks: records/s and turns/s (Python-level per-record validation)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "logs.jsonl"
        rng = np.random.default_rng(0)
        with open(path, "w") as f:
            for i in range(n_conversations):
                k = int(rng.integers(2, 9))
                conv = [{"role": "user" if j % 2 == 0 else "assistant",
                         "content": (USER if j % 2 == 0 else ASSISTANT)[int(rng.integers(0, 6))]} for j in range(k)]
                f.write(json.dumps({"conversation_hash": f"c{i}", "timestamp": "2024-05-01T10:00:00Z",
                                    "conversation": conv}) + "\n")
        say(f"reader: {n_conversations:,} conversations")
        (turns, rej, stats), secs, peak = _measured(
            lambda: load_logs([path], LogsConfig(read_batch_size=10_000)))
    print(f"reader {n_conversations:>8,} conversations ({stats.turns:,} turns): {secs:6.2f} s  "
          f"{n_conversations / secs:10,.0f} records/s  {stats.turns / secs:10,.0f} turns/s  peak {peak / 2**20:6.0f} MiB")
    return {"reader_records_per_s": n_conversations / secs, "reader_turns_per_s": stats.turns / secs,
            "reader_peak_mb": peak / 2**20}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dedup", default="10000,50000,124000")
    ap.add_argument("--turns", default="200000,2000000")
    ap.add_argument("--reader", type=int, default=100_000)
    ap.add_argument("--block", type=int, default=1024)
    ap.add_argument("--no-encode", action="store_true")
    args = ap.parse_args()
    results: dict[str, float] = {"block": args.block}
    if args.dedup:
        results |= bench_question_dedup([int(x) for x in args.dedup.split(",")], args.block, 0.85)
    if not args.no_encode:
        results["minilm_sentences_per_s"] = bench_encode()
    if args.turns:
        results |= bench_prefilter([int(x) for x in args.turns.split(",")])
    if args.reader:
        results |= bench_reader(args.reader)
    path = HERE / "results" / "clarilm.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in results.items()}, indent=1))
    print(f"wrote {path} ({len(results)} numbers); e.g. dedup 124k: "
          f"{fmt_num(results.get('dedup_124000_s', float('nan')))} s")


if __name__ == "__main__":
    main()
