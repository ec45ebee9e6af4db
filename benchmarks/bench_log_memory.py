"""Peak memory of `clarify materialize logs` against the size of the log (issue 29 item 5): the whole group, GX
checks and the LLM extraction included, on a synthetic ShareGPT-style JSONL log of about 20 MB and 200 MB.

    .venv/bin/python benchmarks/bench_log_memory.py                  # 20 MB and 200 MB
    .venv/bin/python benchmarks/bench_log_memory.py --mb 5 50        # smaller sizes (a loaded machine)
    .venv/bin/python benchmarks/run.py --only log_memory             # sizes from $BENCH_LOG_MEMORY_MB ("20,200")

Each size runs in a temp project folder (data/ linked from the repo, a fresh LLM cache and Dagster home), every LLM
role on benchmarks/latency_server.py (an instant OpenAI-compatible stub), logs.max_extractions capping the calls
(the candidates over it are still written, as `skipped` rows). The CLI runs in a child process of its own
(`clarify`'s typer app, in process), which reports its own peak RSS (VmHWM). Reported: peak RSS per size and the
growth per MiB of input between them (goal <= 0.25 MiB/MiB), rows and wall time. No timing asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from _common import BenchResult, peak_rss_mb, print_standalone, say  # noqa: E402

DAY = "2024-05-01"  # ShareGPT records have no timestamp: one log day, the worst case for per-day memory
MAX_EXTRACTIONS = 40
ASK = ("Which city are you in, and are you travelling alone or with family?",
       "Could you tell me roughly what budget you have in mind for this?",
       "Sure, here is how it works: first you preheat the oven, then you knead the dough for ten minutes.",
       "Do you mean the country or the person with that name? Both are often called that.",
       "The answer is 42, which is also the number of the bus that goes to the station.")
USER = ("How do I bake a loaf of bread with a crisp crust at home without a bread machine?",
        "Berlin, and I am going with my two children and my partner.",
        "About 500 euros for the whole week, food included.",
        "Thanks, that was really helpful!",
        "The country, please. I am writing a school report about it.",
        "What about rye bread, does it need a different kind of flour or a sourdough starter?")


def write_log(path: Path, target_bytes: int) -> int:
    """ShareGPT JSONL conversations (human, gpt, human, gpt, human) until the file holds ``target_bytes``; one in
    a thousand lines is broken JSON (quarantined). Returns the number of lines."""
    i = 0
    with path.open("w", encoding="utf-8", buffering=1 << 22) as out:
        while out.tell() < target_bytes:
            if i % 1000 == 999:
                out.write('{"id": "broken' + str(i) + '", "conversations": [\n')
            else:
                turns = [("human", f"{USER[i % 6]} ({i})"), ("gpt", ASK[i % 5]), ("human", USER[(i + 1) % 6]),
                         ("gpt", ASK[(i + 2) % 5]), ("human", USER[(i + 3) % 6])]
                out.write(json.dumps({"id": f"c{i}", "conversations": [{"from": f, "value": v} for f, v in turns]})
                          + "\n")
            i += 1
    return i


def params(work: Path, base_url: str) -> dict:
    stub = {"backend": "openai", "base_url": base_url, "model": "stub", "concurrency": 16, "max_retries": 1,
            "timeout_s": 60}
    return {"logs": {"paths": [str(work / "logs" / "*.jsonl")], "default_log_date": DAY,
                     "max_extractions": MAX_EXTRACTIONS},
            "llm": {"cache_path": str(work / ".cache" / "llm_cache.sqlite"), "roles": {"default": stub}}}


def child(work: Path) -> dict:
    """`clarify materialize logs` in this process (run from ``work``); exit code, wall time, rows, peak RSS."""
    os.chdir(work)
    import duckdb

    from dagster_project.cli import app

    t0 = time.perf_counter()
    try:
        code = app(["materialize", "logs", "--params", "params.yaml", "--log-level", "warning"],
                   standalone_mode=False)
    except SystemExit as done:
        code = done.code
    wall = time.perf_counter() - t0
    rss = peak_rss_mb()
    rows = {}
    if code == 0:
        with duckdb.connect() as con:
            for name in ("raw_logs", "log_candidates", "log_clarifications", "raw_logs_rejected"):
                [(rows[name],)] = con.sql(f"select count(*) from 'assets/logs/{name}/*.parquet'").fetchall()
    return {"exit_code": code or 0, "wall_s": wall, "peak_rss_mb": rss, "rows": rows}


def _run_size(mb: float, base_url: str) -> dict:
    import yaml

    with tempfile.TemporaryDirectory(prefix="bench_log_memory_") as d:
        work = Path(d)
        (work / "data").symlink_to(REPO / "data")
        (work / "logs").mkdir()
        log = work / "logs" / "sharegpt.jsonl"
        lines = write_log(log, int(mb * 2**20))
        (work / "params.yaml").write_text(yaml.safe_dump(params(work, base_url)))
        env = {**os.environ, "PYTHONPATH": str(REPO), "DAGSTER_HOME": str(work / ".dagster"),
               "CLARIFY_HOME": str(work), "TQDM_DISABLE": "1"}
        out = subprocess.run([sys.executable, __file__, "--child", str(work)], env=env, capture_output=True,
                             text=True, check=False)
        line = next((ln for ln in out.stdout.splitlines() if ln.startswith("LOG_MEMORY_JSON ")), None)
        if out.returncode or line is None:
            raise RuntimeError(f"bench_log_memory child ({mb} MB) failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
        result = json.loads(line.split(" ", 1)[1])
        if result["exit_code"]:
            raise RuntimeError(f"clarify materialize logs ({mb} MB) exited {result['exit_code']}:\n"
                               f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
        return result | {"log_mib": log.stat().st_size / 2**20, "conversations": lines}


def bench_log_memory(sizes_mb: tuple[float, float] | None = None) -> BenchResult:
    """Two log sizes, each in its own process, against one stub server."""
    from bench_backends import latency_stub

    if sizes_mb is None:
        small, big = (float(x) for x in os.environ.get("BENCH_LOG_MEMORY_MB", "20,200").split(","))
    else:
        small, big = sizes_mb
    res = BenchResult("log_memory")
    with latency_stub() as url:
        runs = {}
        for label, mb in (("small", small), ("big", big)):
            say(f"log_memory: clarify materialize logs on a {mb:g} MB log")
            runs[label] = m = _run_size(mb, url + "/v1")
            rows = m["rows"]
            res.add(f"{label}_log_mib", round(m["log_mib"], 1), f"{label}: log size", "MiB",
                    f"{m['conversations']:,} conversations, {rows['raw_logs']:,} turns, "
                    f"{rows['log_candidates']:,} candidates, {rows['log_clarifications']:,} extraction rows")
            res.add(f"{label}_peak_rss_mb", m["peak_rss_mb"], f"{label}: peak RSS of clarify materialize logs", "MiB")
            res.add(f"{label}_wall_s", m["wall_s"], f"{label}: wall time", "s")
    growth = (runs["big"]["peak_rss_mb"] - runs["small"]["peak_rss_mb"]) / (runs["big"]["log_mib"]
                                                                            - runs["small"]["log_mib"])
    res.add("rss_mib_per_input_mib", growth, "peak RSS growth per MiB of log", "MiB/MiB", "goal <= 0.25")
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", nargs=2, type=float, default=(20.0, 200.0), metavar=("SMALL", "BIG"),
                    help="the two log sizes in MB (default 20 200)")
    ap.add_argument("--child", metavar="DIR", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print("LOG_MEMORY_JSON " + json.dumps(child(Path(args.child))), flush=True)
        return
    print_standalone(bench_log_memory(tuple(args.mb)))


if __name__ == "__main__":
    main()
