"""Small helpers shared by the benchmarks: a timer, a result container, number formatting."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@contextmanager
def timer() -> Iterator[list[float]]:
    """with timer() as t: ...  -> t[0] is the elapsed wall time in seconds (perf_counter)."""
    box = [0.0]
    t0 = time.perf_counter()
    try:
        yield box
    finally:
        box[0] = time.perf_counter() - t0


@dataclass
class BenchResult:
    """metrics: flat name -> number (goes to JSON); lines: (label, value, note) rows for the printed table."""

    name: str
    metrics: dict[str, float | int | str] = field(default_factory=dict)
    lines: list[tuple[str, str, str]] = field(default_factory=list)

    def add(self, key: str, value: float | int | str, label: str, unit: str = "", note: str = "") -> None:
        if isinstance(value, float):
            value = round(value, 6) if abs(value) < 1e6 else round(value, 1)
        self.metrics[key] = value
        text = value if isinstance(value, str) else fmt_num(value)
        self.lines.append((label, f"{text} {unit}".rstrip(), note))


def fmt_num(x: float | int) -> str:
    """12,345 for big numbers, 3 significant digits for small ones."""
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and abs(x) >= 1000):
        return f"{int(x):,}"
    if x != x or x in (float("inf"), float("-inf")):
        return str(x)
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 100:
        return f"{x:.1f}"
    return f"{x:.3g}"


def ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("inf")


def say(msg: str) -> None:
    import sys

    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def peak_rss_mb() -> float:
    """This process's own peak RSS in MiB: VmHWM, the high-water mark of its current address space.

    Not ru_maxrss: Linux carries that over fork and exec, so a child started by a big parent (run.py after an
    in-process benchmark) reports the parent's peak whenever its own is lower."""
    import resource
    from pathlib import Path

    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # off Linux (macOS reports bytes: an upper bound)


def print_standalone(res: BenchResult, name: str | None = None) -> None:
    """A benchmark run on its own (`python benchmarks/bench_x.py`): its lines, then `BENCH_JSON {...}` (keyed by
    `name` when given) for notes."""
    import json

    for label, value, note in res.lines:
        print(f"{label:<48} {value:>14}  {note}")
    print("BENCH_JSON " + json.dumps({name: res.metrics} if name else res.metrics))
