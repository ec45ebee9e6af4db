"""ClarifyMT-Bench at the paper's sizes against an instant OpenAI-compatible stub: the pipeline's own cost per call.

    .venv/bin/python benchmarks/bench_paper_scale.py --scale 1      # the whole paper size (also: run.py --scale)

params.paper.yaml (85 queries per subtype, six personas, every dialogue, k=5) times `--scale` (sizes rounded,
at least 1), the nine paper methods, EVERY role and the subject on the `openai` backend pointed at
latency_server.py (no added latency), in a temp copy of the project with a fresh cache. Two runs of the
benchmark + evaluation groups in subprocesses (paper_scale_worker.py): cold (every call sent), then warm
(every call cached). Reports calls, wall time, overhead per call and the share of the wall time outside the
HTTP round trips, the stub's own CPU time, peak RSS, cache rows and size, and the warm rerun time.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from _common import BenchResult, print_standalone, ratio, say, timer
from bench_backends import latency_stub

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_SCALE = 0.05  # `make bench`: 1/20 of the paper (4 queries per subtype); --scale 1 for all of it (see benchmarks/README.md)
PAPER_METHODS = ["base", "majority_vote", "cot", "intent_sim", "at_cot", "clarify_agent",
                 "clarify_agent_no_planner", "clarify_agent_no_perceiver", "clarify_agent_no_forecaster"]
PAPER = {"n_per_subtype": 85, "judge_per_subtype": 30, "pairwise_items": 100}
PROFILE = "PAPER_SCALE_PROFILE"  # set: each worker runs under cProfile -> results/paper_scale_<cold|warm>.prof


def scaled_params(base_url: str, cache: Path, scale: float) -> dict[str, Any]:
    """params.paper.yaml resolved, its sizes times `scale`, one subject, every role on the stub, ClarifyMT only.

    Written out whole (no `extends`): params.yaml's trained subjects and external datasets are mappings and
    lists that an overlay cannot drop, and the paper's run has neither."""
    from dagster_project.config import parse_params, read_params_file

    n = {k: max(1, round(v * scale)) for k, v in PAPER.items()}
    stub = {"backend": "openai", "base_url": base_url, "concurrency": 16, "max_retries": 1, "timeout_s": 60}
    out = read_params_file(REPO / "params.paper.yaml") or {}
    out["llm"] = {**out.get("llm", {}), "cache_path": str(cache), "roles": {"default": {**stub, "model": "stub-role"}},
                  "subjects": {"smollm2": {**stub, "model": "stub-subject"}}}
    out["embedder"] = {**out.get("embedder", {}), "cache_path": str(cache.parent / "embeddings.sqlite")}
    # every dialogue (the paper's 6,120 are 1,020 validated queries x 6 personas): the automatic filter is off, since
    # the stub's hash-random ratings and subtype verdicts would remove over half of the pairs at random
    bench = out.get("benchmark", {})
    out["benchmark"] = {**bench, "n_per_subtype": n["n_per_subtype"],
                        "validation": {**bench.get("validation", {}), "min_quality": 1, "subtype_check": False}}
    ev = {k: v for k, v in out.get("evaluation", {}).items()
          if k not in ("subject_methods", "trained_pairs", "judge_subject_pairs", "judge_subject_datasets")}
    out["evaluation"] = {**ev, "methods": PAPER_METHODS, "judge_per_subtype": n["judge_per_subtype"],
                         "pairwise_items": n["pairwise_items"], "datasets": ["clarifymt"], "trained_baseline": None}
    parse_params(out, "paper-scale params")  # a params.yaml change that breaks this run fails here, by key
    return out


def _stats(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/stats", timeout=10) as r:
        return json.loads(r.read())


def _worker(work: Path, params: Path, name: str) -> dict[str, Any]:
    """One run in a subprocess; its stage lines (with the RSS after each) go to results/paper_scale_<name>.log."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "TQDM_DISABLE": "1"}
    profile = ["-m", "cProfile", "-o", str(HERE / "results" / f"paper_scale_{name}.prof")] if PROFILE in env else []
    proc = subprocess.run([sys.executable, *profile, str(HERE / "paper_scale_worker.py"), str(work), str(params)],
                          check=False, env=env, capture_output=True, text=True)
    log = HERE / "results" / f"paper_scale_{name}.log"
    log.parent.mkdir(exist_ok=True)
    log.write_text(proc.stderr)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("PAPER_JSON ")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"paper-scale worker failed ({proc.returncode}): {proc.stderr[-3000:]}")
    out = json.loads(line.split(" ", 1)[1])
    if out["failed"]:
        raise RuntimeError(f"paper-scale run: group(s) {out['failed']} failed: {proc.stderr[-3000:]}")
    return out


def _cache_size(cache: Path) -> tuple[int, int]:
    """(rows, bytes of the database with its WAL)."""
    with sqlite3.connect(cache) as con:
        rows = con.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
    return rows, sum(p.stat().st_size for p in cache.parent.glob(cache.name + "*"))


def bench_paper_scale(scale: float = DEFAULT_SCALE) -> BenchResult:
    res = BenchResult("paper_scale")
    with latency_stub() as url:
        with tempfile.TemporaryDirectory(prefix="bench_paper_") as d:
            work = Path(d)
            (work / "data").symlink_to(REPO / "data")
            cache = work / ".cache" / "llm_cache.sqlite"
            params = work / "params.yaml"
            params.write_text(yaml.safe_dump(scaled_params(url + "/v1", cache, scale), sort_keys=False))
            runs = {}
            for name in ("cold", "warm"):
                before = _stats(url)
                say(f"paper_scale: {name} run, scale {scale} (benchmark + evaluation groups)")
                with timer() as t:
                    runs[name] = _worker(work, params, name)
                after = _stats(url)
                runs[name] |= {"wall_s": t[0], "http_requests": after["requests"] - before["requests"],
                               "stub_cpu_s": after["process_cpu_s"] - before["process_cpu_s"],
                               "stub_handler_s": after["handler_s"] - before["handler_s"]}
            rows, size = _cache_size(cache)
    _report(res, scale, runs["cold"], runs["warm"], rows, size)
    return res


def _report(res: BenchResult, scale: float, cold: dict, warm: dict, rows: int, size: int) -> None:
    """Calls are the HTTP requests the stub served (one per request, n samples each); samples are beside them."""
    calls, run_s = cold["http_requests"], cold["run_s"]
    http_s, minilm_s = cold.get("generate_each_s", 0.0), cold.get("encode_s", 0.0) + cold.get("score_s", 0.0)
    res.add("scale", scale, "scale (1 = the paper's sizes)", note=f"{max(1, round(85 * scale))} queries per subtype")
    if "predictions" in cold:
        res.add("evaluated_turns", cold["predictions"], "predictions rows (turns x methods)",
                note=f"{cold.get('queries_kept', 0):,} of {cold.get('queries', 0):,} queries kept, "
                     f"{cold.get('dialogues', 0):,} dialogues, {cold.get('dialogue_turns', 0):,} dialogue turns, "
                     f"{cold.get('prediction_partitions', 0)} subject x method partitions")
    res.add("llm_calls", calls, "LLM calls (HTTP requests), cold run",
            note=f"{cold['samples'] - cold['cache_hits']:,} new samples, {cold['cache_hits']:,} repeats served by "
                 f"the cache, {cold['errors']} errors")
    res.add("cold_run_s", run_s, "cold run: benchmark + evaluation", "s",
            note=f"benchmark {cold['benchmark_s']:.0f} s, evaluation {cold.get('evaluation_s', 0):.0f} s; "
                 f"+{cold['import_s']:.0f} s imports")
    res.add("overhead_ms_per_call", 1000 * ratio(run_s, calls), "wall / calls", "ms",
            note="goal <= 1.5 ms (issue 30; 2 ms before it)")
    res.add("overhead_less_minilm_ms_per_call", 1000 * ratio(run_s - minilm_s, calls), "(wall - MiniLM) / calls", "ms",
            note="MiniLM is the methods' own second model (Intent-Sim encodes, BERTScore), as the LLM is the first")
    res.add("outside_http_share", ratio(run_s - http_s, run_s), "share of the wall time outside HTTP round trips",
            note=f"{http_s:.0f} s inside the openai backend's request loop, {cold['chat_s']:.0f} s in LLMClient.chat")
    res.add("outside_http_ms_per_call", 1000 * ratio(run_s - http_s, calls), "time outside HTTP / calls", "ms",
            note=f"Dagster, GX, parsing, core; MiniLM {minilm_s:.0f} s of it")
    res.add("minilm_s", minilm_s, "MiniLM time, cold run (encode + BERTScore)", "s",
            note=f"encode {cold.get('encode_s', 0):.0f} s, BERTScore {cold.get('score_s', 0):.0f} s")
    res.add("stub_cpu_ms_per_request", 1000 * ratio(cold["stub_cpu_s"], calls), "stub server CPU / HTTP request",
            "ms", note=f"{cold['stub_handler_s']:.1f} s in its handlers; it shares the CPUs with the run")
    res.add("client_cpu_s", cold["cpu_s"], "pipeline process CPU time, cold run", "s",
            note=f"{1000 * ratio(cold['cpu_s'], calls):.2f} ms per call")
    res.add("peak_rss_mb", max(cold["peak_rss_mb"], warm["peak_rss_mb"]), "peak RSS of the run", "MB",
            note=f"cold {cold['peak_rss_mb']:.0f}, warm {warm['peak_rss_mb']:.0f}; goal <= 2048 MB; cold peak in the "
                 f"step after: {cold.get('rss_peak_after', '?')[:90].replace('[', '(').replace(']', ')')} "  # not rich markup
                 f"(results/paper_scale_cold.log); in {cold.get('rss_peak_in') or '?'}")
    res.add("cache_rows", rows, "cache rows", note=f"{size / 2**20:.1f} MB with WAL")
    res.add("cache_mb", size / 2**20, "cache file size", "MB")
    res.add("warm_rerun_s", warm["run_s"], "warm rerun: everything cached", "s",
            note=f"{warm['cache_hits']:,} hits, {warm['http_requests']} requests sent; MiniLM "
                 f"{warm.get('encode_s', 0) + warm.get('score_s', 0):.0f} s of it; goal <= 120 s")
    for run, m in (("cold", cold), ("warm", warm)):  # the raw counters, for notes
        res.metrics |= {f"{run}_{k}": round(v, 3) if isinstance(v, float) else v for k, v in m.items()
                        if isinstance(v, int | float)}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=DEFAULT_SCALE, help="fraction of the paper's sizes")
    print_standalone(bench_paper_scale(ap.parse_args().scale), "paper_scale")
