"""Peers against the same instant stub: distilabel and bespokelabs-curator send N free-text chat requests each.

    make peers-install                                         # once: .venv-peers (distilabel, curator)
    .venv/bin/python benchmarks/run.py --only paper_scale,peers   # with the ratios to this pipeline
    .venv/bin/python benchmarks/bench_peers.py --requests 12014   # the peers alone

Starts latency_server.py (no added latency) on 127.0.0.1 and runs peer_worker.py in `.venv-peers` once per
peer (distilabel's Pipeline with OpenAILLM; curator with its openai and its litellm backend), concurrency 16 as
paper_scale's roles. Reports per peer the wall and CPU time per request (imports excluded), the peak RSS of the
worker's process tree, and the requests the stub served (checked against the prompts sent). Given paper_scale's
numbers from the same run, adds the ratios "pipeline ms per request / peer ms per request". Skipped, with a line
saying so, when `.venv-peers` is absent: the peers are an optional comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from _common import BenchResult, print_standalone, ratio, say

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PEER_VENV = REPO / ".venv-peers"
PEERS = ("distilabel", "curator-openai", "curator-litellm")
DEFAULT_REQUESTS = 12_014  # paper_scale's cold run at --scale 0.05
CONCURRENCY = 16  # paper_scale's roles
SKIP_LINE = "peer venv absent: make peers-install"


def _stats(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/stats", timeout=10) as r:
        return json.loads(r.read())


def _tree_rss_mb(pid: int) -> float:
    """RSS of a process and all its descendants, in MiB (0 once it is gone)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total / 2**20


def run_peer(python: Path, peer: str, url: str, requests: int) -> dict[str, Any]:
    """One peer_worker.py run; its stderr goes to results/peers_<peer>.log, the tree's RSS is sampled every 0.2 s."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY",
                        "all_proxy", "VIRTUAL_ENV")} | {"NO_PROXY": "127.0.0.1,localhost", "TQDM_DISABLE": "1"}
    log = HERE / "results" / f"peers_{peer}.log"
    log.parent.mkdir(exist_ok=True)
    before = _stats(url)
    with tempfile.TemporaryDirectory(prefix=f"bench_peer_{peer}_") as cache, open(log, "w") as err:
        out_path = Path(cache) / "stdout.txt"  # a file, not a pipe: nobody reads a pipe while the tree is sampled
        with open(out_path, "w") as out_file:
            proc = subprocess.Popen([str(python), str(HERE / "peer_worker.py"), peer, url + "/v1", str(requests),
                                     str(CONCURRENCY), cache], stdout=out_file, stderr=err, text=True, env=env)
            tree_peak, deadline = 0.0, time.monotonic() + 1800
            while proc.poll() is None:
                tree_peak = max(tree_peak, _tree_rss_mb(proc.pid))
                if time.monotonic() > deadline:
                    proc.kill()
                time.sleep(0.2)
        out = out_path.read_text()
    after = _stats(url)
    line = next((ln for ln in out.splitlines() if ln.startswith("PEER_JSON ")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"peer {peer} failed (exit {proc.returncode}); its log: {log}: "
                           f"{log.read_text()[-1500:]}")
    m = json.loads(line.split(" ", 1)[1])
    m |= {"served": int(after["requests"] - before["requests"]),
          "stub_cpu_s": after["process_cpu_s"] - before["process_cpu_s"], "peak_rss_mb": max(m["peak_rss_mb"], tree_peak)}
    if m["answered"] < m["prompts"] or m["served"] < m["prompts"]:  # a cached or lost request: not a fair measure
        raise RuntimeError(f"peer {peer}: {m['answered']:,} of {m['prompts']:,} prompts answered, {m['served']:,} "
                           f"requests reached the stub; its log: {log}")
    return m


def compare(ours: dict[str, Any], peers: dict[str, dict[str, Any]]) -> list[tuple[str, float, str]]:
    """(label, pipeline ms per request / peer ms per request, RSS side by side) for each peer; < 1: ours is faster."""
    rows = []
    for peer, m in peers.items():
        peer_ms = 1000 * ratio(m["wall_s"], m["prompts"])
        cpu = ""  # CPU per request: steadier than wall time when other processes load the machine
        if "client_cpu_s" in ours and "llm_calls" in ours:
            cpu = (f"; CPU {1000 * ratio(ours['client_cpu_s'], ours['llm_calls']):.2f} ms vs "
                   f"{1000 * ratio(m['cpu_s'], m['prompts']):.2f} ms")
        rows.append((peer, ratio(ours["overhead_ms_per_call"], peer_ms),
                     f"pipeline {ours['overhead_ms_per_call']:.2f} ms vs {peer_ms:.2f} ms per request{cpu}; peak RSS "
                     f"pipeline {ours['peak_rss_mb']:,.0f} MB vs {m['peak_rss_mb']:,.0f} MB"))
    return rows


def bench_peers(requests: int | None = None, ours: dict[str, Any] | None = None,
                venv: Path | None = None, peers: tuple[str, ...] = PEERS) -> BenchResult:
    """`peers` (default every one) in `venv` (default PEER_VENV); `ours`: paper_scale's metrics from the same run
    (its llm_calls set the request count)."""
    res = BenchResult("peers")
    venv = venv or PEER_VENV
    python = venv / "bin" / "python"
    if not python.exists():
        say(f"peers: {SKIP_LINE}")
        res.add("skipped", SKIP_LINE, "peers skipped", note=f"{venv} not found")
        return res
    if requests is None:
        requests = int(ours["llm_calls"]) if ours and "llm_calls" in ours else DEFAULT_REQUESTS
    from bench_backends import latency_stub

    results, failed = {}, {}
    with latency_stub() as url:
        for peer in peers:
            say(f"peers: {peer}, {requests:,} requests, concurrency {CONCURRENCY}")
            try:
                results[peer] = run_peer(python, peer, url, requests)
            except (RuntimeError, OSError) as err:  # the other peers still run; the benchmark fails below
                failed[peer] = str(err)
                say(f"peers: {peer} FAILED: {err}")
    _report(res, requests, results, ours)
    if failed:
        raise RuntimeError(f"peer(s) {sorted(failed)} failed; numbers of the others: {res.metrics}")
    return res


def _report(res: BenchResult, requests: int, results: dict[str, dict[str, Any]], ours: dict[str, Any] | None) -> None:
    note = ("paper_scale's cold run's HTTP requests" if ours and "llm_calls" in ours else
            "standalone default (paper_scale's count at --scale 0.05)" if requests == DEFAULT_REQUESTS else "--requests")
    res.add("requests", requests, "chat requests per peer", note=note)
    for peer, m in results.items():
        key = peer.replace("-", "_")
        res.add(f"{key}_ms_per_request", 1000 * ratio(m["wall_s"], m["prompts"]), f"{peer} {m['version']}: wall / "
                "request", "ms", note=f"{m['wall_s']:.1f} s, +{m['import_s']:.1f} s imports")
        res.add(f"{key}_cpu_ms_per_request", 1000 * ratio(m["cpu_s"], m["prompts"]), f"{peer}: process CPU / request",
                "ms", note=f"stub CPU {1000 * ratio(m['stub_cpu_s'], m['served']):.2f} ms per request")
        res.add(f"{key}_peak_rss_mb", m["peak_rss_mb"], f"{peer}: peak RSS of the worker's process tree", "MB")
        res.add(f"{key}_served", m["served"], f"{peer}: requests the stub served",
                note=f"{m['answered']:,} of {m['prompts']:,} prompts answered"
                     + (f"; {m['served'] - m['prompts']:+,} beside the prompts (the peer's own probes, retries)"
                        if m["served"] != m["prompts"] else ""))
    if ours and "overhead_ms_per_call" in ours and "peak_rss_mb" in ours:
        for peer, value, note in compare(ours, results):
            res.add(f"ratio_{peer.replace('-', '_')}", value, f"pipeline / {peer} ms per request", note=note)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=DEFAULT_REQUESTS, help="chat requests per peer")
    ap.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated subset of {', '.join(PEERS)}")
    args = ap.parse_args()
    chosen = tuple(p.strip() for p in args.peers.split(",") if p.strip())
    if unknown := sorted(set(chosen) - set(PEERS)):
        ap.error(f"unknown peer(s) {unknown}; known: {', '.join(PEERS)}")
    print_standalone(bench_peers(args.requests, peers=chosen), "peers")
