"""The transcript viewer at the benchmark's paper size: one dataset of 16,320 turns (1,020 queries x 6 personas)
x 9 methods, synthetic (tests/viewer_data.py). Prints the write time, the page size, and in the system's Chromium
the time to first contentful paint, to the list being usable, to open one dialogue and to show one ClarifyAgent
row's module outputs (its packed block unpacked first; medians of --loads).

    .venv/bin/python benchmarks/bench_viewer.py [--queries 1020] [--loads 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from viewer_data import write_assets  # noqa: E402

from dagster_project.reporting.transcripts import write_transcripts  # noqa: E402

PAINT = """() => {
  const fcp = performance.getEntriesByName('first-contentful-paint')[0];
  const ready = performance.getEntriesByName('viewer-ready')[0];
  return {fcp: fcp ? fcp.startTime : null, ready: ready ? ready.startTime : null};
}"""


def measure(page_file: Path, loads: int) -> dict[str, float]:
    """Medians over `loads` fresh page loads: first contentful paint, viewer-ready mark, dialogue open, module
    outputs shown."""
    from playwright.sync_api import sync_playwright

    chromium = next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)
    if chromium is None:
        raise SystemExit("no chromium on PATH (apt-get install chromium)")
    fcp, ready, opened, opened_outputs = [], [], [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium)
        for _ in range(loads):
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(page_file.as_uri(), wait_until="load")
            page.wait_for_function("performance.getEntriesByName('viewer-ready').length > 0")
            page.wait_for_function("performance.getEntriesByName('first-contentful-paint').length > 0")
            marks = page.evaluate(PAINT)
            fcp.append(marks["fcp"])
            ready.append(marks["ready"])
            opened.append(page.evaluate("""() => {
              const t0 = performance.now();
              document.querySelectorAll('#list button')[100].click();  // opens its dialogue synchronously
              return performance.now() - t0;
            }"""))
            opened_outputs.append(page.evaluate("""async () => {
              const details = document.querySelector('#dialogue details');
              const t0 = performance.now();
              details.querySelector('summary').click();
              const pre = details.querySelector('pre');
              while (!pre.textContent.startsWith('{')) await new Promise((r) => setTimeout(r, 1));
              return performance.now() - t0;
            }"""))
            page.close()
        browser.close()
    return {"first_paint_ms": statistics.median(fcp), "list_ready_ms": statistics.median(ready),
            "open_dialogue_ms": statistics.median(opened),
            "open_module_outputs_ms": statistics.median(opened_outputs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=1020, help="queries (x 6 personas, 16 turns per query)")
    ap.add_argument("--loads", type=int, default=3, help="page loads to take the median over")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        counts = write_assets(Path(tmp), args.queries)
        t0 = time.perf_counter()
        [page] = write_transcripts(tmp)
        write_s = time.perf_counter() - t0
        size = page.stat().st_size
        print(f"{counts['turns']:,} turns, {counts['predictions']:,} predictions: page written in {write_s:.1f} s, "
              f"{size / 2**20:.1f} MiB")
        for name, value in measure(page, args.loads).items():
            print(f"{name}: {value:.0f}")


if __name__ == "__main__":
    main()
