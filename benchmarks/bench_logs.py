"""Log ingest at scale (issue 19 item 2): a synthetic chat log of 1M conversations (5M turns) over 30 days,
ingested end to end through the project's real path (the `logs` group's Dagster assets raw_logs + log_candidates
in one single-run backfill over the 30 days: read, validate, quarantine, route to days, write one Parquet per
day, prefilter; the LLM extraction is left out), then the same at 1/10 the size for the memory ratio.

    .venv/bin/python benchmarks/bench_logs.py                 # 1M and 100k conversations
    .venv/bin/python benchmarks/bench_logs.py --scale 0.05    # 50k and 5k (a loaded machine)
    .venv/bin/python benchmarks/run.py --only logs            # scale from $BENCH_LOGS_SCALE (default 1)

Each size runs in its own process so its peak RSS (VmHWM) is its own. Reported: the day-discovery pass
(`clarify materialize logs` does it before registering the days), the ingest run, turns/s of each (wall clock, and
per CPU second of the process, which a loaded machine distorts less), peak RSS, and big/small ratios. Goals: >= 100k turns/s, peak RSS of 10x the input within 1.5x. No timing asserts.
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
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _common import BenchResult, peak_rss_mb, ratio, say

DAYS = 30
TURNS = 5  # per conversation: user, assistant, user, assistant, user
FILES = 4
ASK = ("Which city are you in?", "Could you tell me your budget?", "Sure, here is how it works.",
       "Do you mean the country or the person?", "It is 42.")
USER = ("How do I bake bread?", "Berlin.", "About 500 euros.", "Thanks!", "The country.", "What about rye?")


def write_log(folder: Path, n_conversations: int) -> list[Path]:
    """n conversations in FILES JSONL files (WildChat layout), timestamps spread over DAYS days; 0.1% broken."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"part{i}.jsonl" for i in range(FILES)]
    handles = [p.open("w", encoding="utf-8", buffering=1 << 22) for p in paths]
    conv = ('{{"conversation_hash": "c{i}", "timestamp": "2024-05-{d:02d}T{h:02d}:00:00Z", "language": "English", '
            '"conversation": [{{"role": "user", "content": "{u0} ({i})"}}, {{"role": "assistant", "content": "{a}"}}, '
            '{{"role": "user", "content": "{u1}"}}, {{"role": "assistant", "content": "{a2}"}}, '
            '{{"role": "user", "content": "{u2}"}}]}}\n')
    for i in range(n_conversations):
        line = '{"conversation_hash": "broken' + str(i) + '", \n' if i % 1000 == 999 else conv.format(
            i=i, d=1 + i % DAYS, h=i % 24, u0=USER[i % 6], a=ASK[i % 5], u1=USER[(i + 1) % 6], a2=ASK[(i + 2) % 5],
            u2=USER[(i + 3) % 6])
        handles[i % FILES].write(line)
    for h in handles:
        h.close()
    return paths


def child(folder: Path, n: int) -> dict[str, float]:
    """One size in this process: write the log, discover its days, ingest them in one run; timings + peak RSS."""
    import dagster as dg
    import yaml

    from dagster_project.config import load_params
    from dagster_project.core.clarilm.logs import days_to_ingest
    from dagster_project.defs.logs import assets as logs
    from dagster_project.defs.logs.partitions import range_tags, register_days
    from dagster_project.lib.resources import LLMResource  # not called: the extraction is not selected
    from dagster_project.lib.io_manager import WarehouseIOManager

    t0 = time.perf_counter()
    write_log(folder / "logs", n)
    write_s = time.perf_counter() - t0
    (folder / "params.yaml").write_text(yaml.safe_dump({"logs": {"paths": [str(folder / "logs/*.jsonl")], "default_log_date": "2024-05-01"}}))
    params = load_params(folder / "params.yaml")
    t0 = time.perf_counter()
    days, counts = days_to_ingest(params.logs)
    discover_s = time.perf_counter() - t0
    instance = dg.DagsterInstance.ephemeral()
    register_days(instance, days)
    assets = list(logs.build(params).assets)
    io = WarehouseIOManager(base_dir=str(folder / "assets"), db_path=str(folder / "assets/warehouse.duckdb"))
    t0, c0 = time.perf_counter(), time.process_time()
    result = dg.materialize(assets, selection=dg.AssetSelection.assets(
        ["logs", "raw_logs"], ["logs", "raw_logs_rejected"], ["logs", "raw_logs_ledger"], ["logs", "log_candidates"]),
        resources={"params": params, "io_manager": io, "llm": LLMResource(params.llm)}, instance=instance, tags=range_tags(days[0], days[-1]))
    ingest_s, ingest_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    mats = [e for e in result.get_asset_materialization_events() if e.asset_key == dg.AssetKey(["logs", "raw_logs"])]
    return {"conversations": n, "turns": TURNS * (n - n // 1000), "days": len(days), "records": sum(counts.values()),
            "raw_logs_materializations": len(mats), "runs": 1, "write_s": write_s, "discover_s": discover_s,
            "ingest_s": ingest_s, "ingest_cpu_s": ingest_cpu_s, "peak_rss_mb": peak_rss_mb()}


def _run_child(n: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench_logs_") as tmp:
        out = subprocess.run([sys.executable, __file__, "--child", str(n), tmp], capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(HERE.parent)}, check=False)
        if out.returncode:
            raise RuntimeError(f"bench_logs child {n} failed:\n{out.stderr[-3000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])


def bench_logs(scale: float | None = None) -> BenchResult:
    """1M conversations x scale, and a tenth of it, each in its own process."""
    scale = float(os.environ.get("BENCH_LOGS_SCALE", "1")) if scale is None else scale
    big_n = max(1000, int(1_000_000 * scale))
    res = BenchResult("logs")
    sizes = {}
    for label, n in (("small", big_n // 10), ("big", big_n)):
        say(f"logs: {n:,} conversations over {DAYS} days")
        m = sizes[label] = _run_child(n)
        turns = m["turns"]
        res.add(f"{label}_conversations", n, f"{label}: conversations ({m['days']} days, {m['records']:,} records)")
        res.add(f"{label}_ingest_s", m["ingest_s"], f"{label}: ingest run (raw_logs + prefilter, 1 run)", "s",
                f"{m['raw_logs_materializations']} day partitions")
        res.add(f"{label}_ingest_turns_per_s", turns / m["ingest_s"], f"{label}: ingest turns/s", "", "goal >= 100k")
        res.add(f"{label}_ingest_turns_per_cpu_s", turns / m["ingest_cpu_s"], f"{label}: ingest turns per CPU second",
                "", "this process's CPU time (all its threads): less sensitive to other load")
        res.add(f"{label}_discover_s", m["discover_s"], f"{label}: day discovery pass", "s",
                f"{turns / m['discover_s']:,.0f} turns/s")
        res.add(f"{label}_end_to_end_turns_per_s", turns / (m["ingest_s"] + m["discover_s"]),
                f"{label}: end to end turns/s (discovery + run)")
        res.add(f"{label}_peak_rss_mb", m["peak_rss_mb"], f"{label}: peak RSS", "MiB")
    res.add("rss_ratio_10x", ratio(sizes["big"]["peak_rss_mb"], sizes["small"]["peak_rss_mb"]),
            "peak RSS 10x / 1x input", "x", "goal <= 1.5")
    res.add("time_ratio_10x", ratio(sizes["big"]["ingest_s"], sizes["small"]["ingest_s"]), "ingest time 10x / 1x", "x")
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of 1M conversations (default 1)")
    ap.add_argument("--child", nargs=2, metavar=("N", "DIR"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(Path(args.child[1]), int(args.child[0]))))
        return
    res = bench_logs(args.scale)
    for label, value, note in res.lines:
        print(f"{label:<58} {value:>14}  {note}")
    print("BENCH_JSON " + json.dumps(res.metrics))


if __name__ == "__main__":
    main()
