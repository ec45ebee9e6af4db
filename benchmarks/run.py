"""Run the performance benchmarks and print ratios measured in this one run (no timing assertions anywhere).

    .venv/bin/python benchmarks/run.py                 # all (make bench)
    .venv/bin/python benchmarks/run.py --only cache    # one or more: --only llm,dedup
    .venv/bin/python benchmarks/run.py --only paper_scale --scale 1   # ClarifyMT-Bench at the paper's full sizes
    .venv/bin/python benchmarks/run.py --only paper_scale,peers       # + distilabel and curator (make peers-install)

Prints a table, then one JSON line with every number; the same JSON goes to benchmarks/results/latest.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

# No model hub, ever: MiniLM and SmolLM2 come from installed packages.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import BenchResult, say  # noqa: E402

RESULTS = HERE / "results" / "latest.json"


def _benchmarks(scale: float, done: dict[str, dict]) -> dict[str, Callable[[], BenchResult]]:
    """Name -> benchmark; `done` holds the metrics of those already run (peers reads paper_scale's from it)."""
    from bench_backends import bench_openai, bench_rerun, bench_tokens, bench_vllm
    from bench_cache import bench_cache
    from bench_dedup import bench_dedup, bench_dedup_ann
    from bench_judge_overlap import bench_judge_overlap
    from bench_llm import bench_llm
    from bench_log_memory import bench_log_memory
    from bench_logs import bench_logs
    from bench_paper_scale import bench_paper_scale
    from bench_parallel import bench_parallel
    from bench_parsing import bench_parsing
    from bench_peers import bench_peers
    from bench_retrieval import bench_retrieval
    from bench_serving import bench_serving

    # cheap first, so a broken model install still leaves numbers for the rest
    return {"parsing": bench_parsing, "cache": bench_cache, "dedup": bench_dedup, "dedup_ann": bench_dedup_ann,
            "llm": bench_llm, "tokens": bench_tokens, "rerun": bench_rerun, "openai": bench_openai, "vllm": bench_vllm,
            "retrieval": bench_retrieval, "logs": bench_logs, "log_memory": bench_log_memory, "serving": bench_serving,
            "paper_scale": lambda: bench_paper_scale(scale), "peers": lambda: bench_peers(ours=done.get("paper_scale")),
            "parallel": bench_parallel, "judge_overlap": bench_judge_overlap}


NAMES = ("parsing", "cache", "dedup", "dedup_ann", "llm", "tokens", "rerun", "openai", "vllm", "retrieval", "logs",
         "log_memory", "serving", "paper_scale", "peers", "parallel", "judge_overlap")
# the performance table's headline ratios (ARCHITECTURE §4 / issue 10), printed together at the end
HEADLINES = (("P1 warm-cache rerun vs cold", "rerun", "p1_warm_vs_cold"),
             ("P2 openai concurrency 32 vs 1", "openai", "p2_concurrency_speedup"),
             ("P3 vLLM batched vs one call each", "vllm", "p3_batched_vs_sequential"),
             ("partitions: 4 processes vs 1", "parallel", "parallel_speedup"),
             ("llama.cpp tokens/s, 2 threads", "tokens", "llamacpp_tok_s"),
             ("paper scale: ms per LLM call", "paper_scale", "overhead_ms_per_call"),
             ("paper scale: warm rerun s", "paper_scale", "warm_rerun_s"),
             ("paper scale: peak RSS MB", "paper_scale", "peak_rss_mb"),
             ("logs: peak RSS MiB per MiB of log", "log_memory", "rss_mib_per_input_mib"))


def _machine() -> dict[str, object]:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True,
                                text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "git_commit": commit, "loadavg_start": [round(x, 2) for x in os.getloadavg()]}


def _cpu_busy_s() -> float | None:
    """Busy CPU seconds of the whole machine so far (all processes), from /proc/stat; None off Linux."""
    try:
        f = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in f[1:9])
        return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _self_cpu_s() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class Contention:
    """Share of the machine's CPU time that OTHER processes used while a benchmark ran (0% = quiet machine)."""

    def __enter__(self) -> Contention:
        self.busy, self.own, self.t = _cpu_busy_s(), _self_cpu_s(), time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self.t
        busy = _cpu_busy_s()
        self.other_pct = None
        if busy is not None and self.busy is not None and wall > 0:
            other = max(0.0, (busy - self.busy) - (_self_cpu_s() - self.own))
            self.other_pct = round(100 * other / (wall * (os.cpu_count() or 1)), 1)


def _busy(r: BenchResult) -> str:
    pct = r.metrics.get("other_cpu_pct")
    if pct is None:
        return "other processes' CPU use unknown"
    warn = " - numbers are depressed, rerun on a quiet machine" if pct >= 10 else ""
    return f"other processes used {pct:.0f}% of the CPUs{warn}"


def _print_table(results: list[BenchResult], total_s: float) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # plain aligned lines
        for r in results:
            print(f"\n== {r.name} ({r.metrics['wall_s']:.1f} s, {_busy(r)})")
            for label, value, note in r.lines:
                print(f"  {label:<48} {value:>18}  {note}")
        print(f"\ntotal {total_s:.1f} s")
        return
    table = Table(title=f"clarify-pipeline benchmarks (one run, {total_s:.0f} s total)", show_lines=False)
    table.add_column("bench", style="bold")
    table.add_column("measure")
    table.add_column("value", justify="right", style="cyan")
    table.add_column("note", style="dim")
    for r in results:
        for k, (label, value, note) in enumerate(r.lines):
            table.add_row(r.name if k == 0 else "", label, value, note)
        table.add_row("", "[dim]wall time of this benchmark[/dim]", f"[dim]{r.metrics['wall_s']:.1f} s[/dim]",
                      _busy(r), end_section=True)
    Console(width=max(140, Console().width)).print(table)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", default=[], metavar="NAME",
                    help=f"run only these (repeat or comma-separate): {', '.join(NAMES)}")
    ap.add_argument("--scale", type=float, default=None, metavar="F",
                    help="paper_scale: fraction of the paper's sizes (default: bench_paper_scale.DEFAULT_SCALE)")
    ap.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON (default: %(default)s)")
    args = ap.parse_args(argv)
    only = [n.strip() for item in args.only for n in item.split(",") if n.strip()]
    bad = sorted(set(only) - set(NAMES))
    if bad:
        ap.error(f"unknown benchmark(s) {bad}; choose from {list(NAMES)}")
    selected = [n for n in NAMES if not only or n in only]

    meta = _machine()
    from bench_paper_scale import DEFAULT_SCALE

    done: dict[str, dict] = {}
    benches = _benchmarks(DEFAULT_SCALE if args.scale is None else args.scale, done)
    results: list[BenchResult] = []
    failed: dict[str, str] = {}
    t0 = time.perf_counter()
    for name in selected:
        say(f"== {name}")
        t = time.perf_counter()
        with Contention() as c:
            try:
                res = benches[name]()
            except Exception as err:  # noqa: BLE001 - one broken benchmark must not cost the others' numbers
                traceback.print_exc()
                failed[name] = f"{type(err).__name__}: {err}"[:500]
                say(f"{name} FAILED: {failed[name]}")
                continue
        res.metrics["wall_s"] = round(time.perf_counter() - t, 2)
        res.metrics["other_cpu_pct"] = c.other_pct
        results.append(res)
        done[name] = res.metrics
    total = time.perf_counter() - t0
    meta["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]

    payload = {"when": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "total_s": round(total, 2),
               "benchmarks": selected, "failed": failed, "machine": meta, **{r.name: r.metrics for r in results}}
    _print_table(results, total)
    by_name = {r.name: r.metrics for r in results}
    for label, bench, key in HEADLINES:
        if key in by_name.get(bench, {}):
            value = by_name[bench][key]
            print(f"{label:<36} {value if isinstance(value, str) else format(value, '.1f')}")
    line = json.dumps(payload, separators=(",", ":"))
    print("BENCH_JSON " + line)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2) + "\n")
    say(f"wrote {args.out}")
    if failed:
        say(f"FAILED: {', '.join(failed)} (tracebacks above; their numbers are missing)")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
