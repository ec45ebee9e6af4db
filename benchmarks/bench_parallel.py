"""Issue 19 item 4: the evaluation partitions (subject x method) in 1 vs 4 processes against the latency stub
(benchmarks/latency_server.py, 100 ms per reply), with the LLM cache's rows before and after each run.

Every run starts from an empty cache, so each pays every call; the runs must end with the same number of rows,
one per sample generated (usage: samples asked - cache hits), none stored or paid twice. A warm rerun with 4
processes must add no row. Same machinery for 1 and 4: partition runs in worker processes (runs/parallel.py);
`in_process` is today's default path (`clarify materialize` without --processes), for reference.

concurrency (requests in flight per role and process) is 1 by default: each run then waits on the server, as a
run of the agent's sequential module calls does, and 4 processes put 4 requests in flight instead of 1. With a
higher concurrency a run already overlaps its own requests and the processes add less (docs/scaling.md).
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
from pathlib import Path

from _common import BenchResult, ratio, say, timer
from bench_backends import latency_stub

SUBJECTS = ("s1", "s2")
METHODS = ("base", "cot", "majority_vote", "at_cot")  # subject calls only: the stub's "ok" replies suffice


def _write_project(folder: Path, url: str, dialogues: int, concurrency: int, runs: tuple[str, ...]) -> None:
    """persona_dialogues (dialogues x 2 turns) and one params file per run, each with a cache of its own."""
    from dagster_project.core.clarifymt.external import import_dataset
    from dagster_project.io.writers import write_parquet_atomic

    src = folder / "dialogues.jsonl"
    with src.open("w") as fh:
        for d in range(dialogues):
            fh.write(json.dumps({"dialogue_id": f"d{d}", "turn": 1, "user": f"Plan trip number {d}?",
                                 "persona": "precise", "reference_action": "clarify", "reference_question": "Where?"})
                     + "\n")
            fh.write(json.dumps({"dialogue_id": f"d{d}", "turn": 2, "user": "Porto, in May.", "persona": "precise",
                                 "reference_action": "answer"}) + "\n")
    write_parquet_atomic(import_dataset("clarifymt", "generic", src).turns,
                         folder / "assets/benchmark/persona_dialogues.parquet")
    import yaml

    for run in runs:
        role = {"backend": "openai", "model": "latency-stub", "base_url": url + "/v1",
                "concurrency": concurrency, "timeout_s": 60, "max_retries": 1}
        params = {"llm": {"cache_path": str(folder / f"cache_{run}.sqlite"), "roles": {"default": role},
                          "subjects": {s: {**role, "model": f"latency-stub-{s}"} for s in SUBJECTS}},
                  "evaluation": {"methods": list(METHODS), "bertscore": False, "max_dialogues": None}}
        (folder / f"params_{run}.yaml").write_text(yaml.safe_dump(params))


def _cache_counts(path: Path) -> dict[str, int]:
    """Rows, distinct keys and samples generated (asked - cache hits, from the usage table) of one cache file."""
    if not path.exists():
        return {"rows": 0, "keys": 0, "generated": 0}
    with sqlite3.connect(path) as con:
        rows, keys = con.execute("SELECT count(*), count(DISTINCT key) FROM responses").fetchone()
        generated = con.execute("SELECT coalesce(sum(samples - cache_hits), 0) FROM usage").fetchone()[0]
    return {"rows": rows, "keys": keys, "generated": generated}


def bench_parallel(dialogues: int = 40, latency_ms: int = 100, concurrency: int = 1, high: int = 4) -> BenchResult:
    import dagster as dg

    from dagster_project.config import load_params
    from dagster_project.definitions import build_definitions
    from dagster_project.runs.group_runs import group_stages
    from dagster_project.runs.parallel import Execution, run_stage

    res = BenchResult("parallel")
    back = Path.cwd()
    walls: dict[str, float] = {}
    counts: dict[str, dict[str, int]] = {}
    runs = {"in_process": 0, "p1": 1, f"p{high}": high}  # run name -> worker processes (0: in this process)
    try:
        with latency_stub(latency_ms) as url, tempfile.TemporaryDirectory(prefix="bench_parallel_") as d:
            folder = Path(d)
            _write_project(folder, url, dialogues, concurrency, tuple(runs))
            os.chdir(folder)
            (folder / ".dagster").mkdir()
            with dg.instance_for_test(temp_dir=str(folder / ".dagster")) as instance:
                defs = build_definitions(load_params(folder / "params_in_process.yaml"))
                (_, first), (pdef, keys), *_ = group_stages(defs, "evaluation")
                job = defs.resolve_implicit_global_asset_job_def()
                assert job.execute_in_process(asset_selection=first, instance=instance).success
                partitions = pdef.get_partition_keys()
                turns = 2 * dialogues
                say(f"parallel: {len(partitions)} partitions x {turns} turns, {latency_ms} ms per reply, "
                    f"concurrency {concurrency} per role")
                # warm the fork server (one import of the project) outside the timed runs
                run_stage(Execution(1, str(folder / "params_p1.yaml")), keys, pdef, partitions[:1], instance)
                (folder / "cache_p1.sqlite").unlink()
                for run, procs in runs.items():
                    cache = folder / f"cache_{run}.sqlite"
                    before = _cache_counts(cache)
                    say(f"parallel: {run}")
                    with timer() as t:
                        if procs:
                            ok = all(o.success for o in run_stage(Execution(procs, str(folder / f"params_{run}.yaml")),
                                                                  keys, pdef, partitions, instance))
                        else:
                            run_defs = build_definitions(load_params(folder / f"params_{run}.yaml"))
                            run_job = run_defs.resolve_implicit_global_asset_job_def()
                            ok = all(run_job.execute_in_process(asset_selection=keys, partition_key=pk,
                                                                instance=instance).success for pk in partitions)
                    if not ok:
                        raise RuntimeError(f"parallel: a {run} run failed")
                    walls[run], counts[run] = t[0], {**_cache_counts(cache), "rows_before": before["rows"]}
                say(f"parallel: warm rerun, {high} processes")
                with timer() as t:
                    run_stage(Execution(high, str(folder / f"params_p{high}.yaml")), keys, pdef, partitions,
                              instance)
                walls["warm"], counts["warm"] = t[0], _cache_counts(folder / f"cache_p{high}.sqlite")
    finally:
        os.chdir(back)
    p1, ph = counts["p1"], counts[f"p{high}"]
    res.add("partitions", len(partitions), "partitions (subject x method)", note=f"{' x '.join(METHODS)} x 2 subjects")
    res.add("llm_calls", p1["generated"], "LLM samples per run", note=f"{latency_ms} ms per reply")
    res.add("in_process_s", walls["in_process"], "today's path: one process, partitions in turn", "s")
    res.add("processes_1_s", walls["p1"], "1 worker process", "s")
    res.add(f"processes_{high}_s", walls[f"p{high}"], f"{high} worker processes", "s")
    res.add("parallel_speedup", ratio(walls["p1"], walls[f"p{high}"]), f"{high} processes vs 1", "x",
            note="goal >= 3x")
    res.add("warm_rerun_s", walls["warm"], f"warm rerun, {high} processes", "s", note="every call a cache hit")
    for run in ("p1", f"p{high}"):
        c = counts[run]
        res.add(f"cache_rows_{run}", c["rows"], f"cache rows {run}: before {c['rows_before']}, after",
                note=f"{c['keys']} distinct keys, {c['generated']} samples generated")
    lost = p1["rows"] - ph["rows"]
    twice = ph["generated"] - ph["rows"]
    res.add("rows_lost_or_extra", lost, f"rows: 1 process minus {high}", note="0 = none lost or duplicated")
    res.add("samples_paid_twice", twice, f"samples generated minus rows ({high} processes)", note="0 = none")
    res.add("warm_rerun_new_rows", counts["warm"]["rows"] - ph["rows"], "rows the warm rerun added", note="0")
    return res
