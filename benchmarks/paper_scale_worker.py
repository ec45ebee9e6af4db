"""One timed run of the benchmark + evaluation groups, for bench_paper_scale (a subprocess, so its peak RSS is its own).

    python benchmarks/paper_scale_worker.py WORKDIR PARAMS

Runs in WORKDIR (a temp copy of the project) as `clarify materialize benchmark` then `... evaluation` do (one
Dagster run per stage and partition, ephemeral instance), with timers around LLMClient.chat (cache + backend)
the openai backend's generate_each (the HTTP round trips) and MiniLM (sentence encoding, BERTScore). Prints one line `PAPER_JSON {...}`.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from functools import wraps
from pathlib import Path
from typing import Any

from _common import peak_rss_mb

GROUPS = ("benchmark", "evaluation")


def _timed(cls: type, name: str, box: dict[str, float]) -> None:
    """Wrap cls.name so that box[name + '_s'] sums its wall time and box[name + '_n'] counts its calls."""
    inner = getattr(cls, name)

    @wraps(inner)
    def outer(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            box[f"{name}_s"] = box.get(f"{name}_s", 0.0) + time.perf_counter() - t
            box[f"{name}_n"] = box.get(f"{name}_n", 0) + 1

    setattr(cls, name, outer)


def _count_results(box: dict[str, float]) -> None:
    """LLMClient.chat's results: requests, samples, cache hits, errors, summed per-request latency."""
    from dagster_project.llm.client import LLMClient

    inner = LLMClient.chat

    @wraps(inner)
    def outer(self: LLMClient, role: str, requests: list, *args: Any, **kwargs: Any) -> list:
        out = inner(self, role, requests, *args, **kwargs)
        box["requests"] = box.get("requests", 0) + len(out)
        box["samples"] = box.get("samples", 0) + sum(len(r.texts) for r in out)
        box["cache_hits"] = box.get("cache_hits", 0) + sum(r.cache_hits for r in out)
        box["errors"] = box.get("errors", 0) + sum(1 for r in out if r.error)
        box["request_latency_s"] = box.get("request_latency_s", 0.0) + sum(r.latency_s for r in out if not r.cached)
        return out

    LLMClient.chat = outer  # type: ignore[method-assign]


def _time_models(box: dict[str, float]) -> None:
    """MiniLM: sentence encoding (dedup, Intent-Sim) as `encode_s`, BERTScore as `score_s`."""
    from bert_score import BERTScorer
    from sentence_transformers import SentenceTransformer

    _timed(SentenceTransformer, "encode", box)
    _timed(BERTScorer, "score", box)


class _RssWatch:
    """Samples this process's RSS every 0.2 s; remembers the peak, the stage line printed last before it and
    where the main thread was (its innermost project frames) when the peak was sampled."""

    def __init__(self) -> None:
        import threading

        import psutil

        self.proc, self.last, self.peak, self.at, self.where = psutil.Process(), "start", 0, "", ""
        self.main = threading.get_ident()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self, step: int = 64 * 2**20) -> None:
        """Each new peak 64 MB above the last one logged goes to the log with where the main thread was."""
        logged = 0
        while not self.stop.wait(0.2):
            rss = self.proc.memory_info().rss
            if rss > self.peak:
                self.peak, self.at, self.where = rss, self.last, self._main_frames()
                if rss >= logged + step:
                    logged = rss
                    print(f"[paper_scale] RSS peak {rss / 2**20:.0f} MB in {self.where}", file=sys.stderr, flush=True)

    def _main_frames(self, keep: int = 4) -> str:
        """The main thread's innermost dagster_project frames, outermost first ('file:line function')."""
        import traceback

        frame = sys._current_frames().get(self.main)
        stack = traceback.extract_stack(frame) if frame is not None else []
        ours = [f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in stack if "dagster_project" in f.filename]
        return " > ".join(ours[-keep:])

    def say(self, message: str) -> None:
        self.last = message
        print(f"[paper_scale] {message} (RSS {self.proc.memory_info().rss / 2**20:.0f} MB)", file=sys.stderr,
              flush=True)


def _sizes(assets: Path) -> dict[str, int]:
    """What the run covered: kept queries, dialogues, evaluated turns (predictions rows) and partitions."""
    from dagster_project.lib.warehouse import read_asset

    out: dict[str, int] = {}
    for key, group, name in (("queries", "benchmark", "single_turn_queries"),
                             ("dialogue_turns", "benchmark", "persona_dialogues"),
                             ("predictions", "evaluation", "predictions")):
        df = read_asset(assets, group, name)
        if df is None:
            continue
        out[key] = df.height
        if key == "queries" and "kept" in df.columns:
            out["queries_kept"] = int(df["kept"].sum())
        if key == "dialogue_turns" and "dialogue_id" in df.columns:
            out["dialogues"] = df["dialogue_id"].n_unique()
        if key == "predictions":
            out["prediction_partitions"] = df.select("subject", "method").n_unique()
    return out


def main(workdir: str, params_path: str) -> dict[str, Any]:
    os.chdir(workdir)
    os.environ |= {"CLARIFY_PARAMS": params_path, "DAGSTER_HOME": str(Path(workdir) / ".dagster")}
    t0 = time.perf_counter()
    import dagster as dg

    from dagster_project.config import load_params
    from dagster_project.definitions import build_definitions
    from dagster_project.llm.backends.openai import OpenAIBackend
    from dagster_project.llm.client import LLMClient
    from dagster_project.runs.group_runs import materialize_group

    box: dict[str, float] = {"import_s": time.perf_counter() - t0}
    _timed(LLMClient, "chat", box)
    _count_results(box)
    _timed(OpenAIBackend, "generate_each", box)
    _time_models(box)
    defs = build_definitions(load_params(params_path))
    failed: list[str] = []
    t = time.perf_counter()
    watch = _RssWatch()
    with dg.DagsterInstance.ephemeral() as instance:
        for group in GROUPS:
            g = time.perf_counter()
            results = materialize_group(defs, group, instance, say=watch.say)
            box[f"{group}_s"] = time.perf_counter() - g
            if not results or not all(r.success for r in results):
                failed.append(group)
                break
    box["run_s"] = time.perf_counter() - t
    watch.stop.set()
    box["rss_peak_after"] = watch.at  # the last stage line printed before the sampled peak: the peak is in the next
    box["rss_peak_in"] = watch.where
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    box["peak_rss_mb"] = peak_rss_mb()
    box["cpu_s"] = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    return {**box, **_sizes(Path(workdir) / "assets"), "failed": failed}  # read after the peak RSS is taken


if __name__ == "__main__":
    print("PAPER_JSON " + json.dumps(main(sys.argv[1], sys.argv[2])), flush=True)
