"""Several processes writing through LLMClient -> LLMCache at once, as parallel partition runs do: requests some
processes share and requests of their own. Counts rows: none lost, none stored or paid for twice."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3
import time
from collections import Counter
from pathlib import Path

from dagster_project.config import parse_params
from dagster_project.llm.backends.base import Job, JobOutput
from dagster_project.llm.chat import ChatRequest
from dagster_project.llm.client import LLMClient

N_PROCS, SHARED, OWN, SAMPLES = 4, 24, 12, 2


class LoggingBackend:
    """Answers `<prompt>#<sample>` after a short delay (so the processes overlap); logs each sample it generates."""

    chunk_size = 4

    def __init__(self, log: Path):
        self.log = log

    def generate(self, jobs: list[Job]) -> list[JobOutput]:
        time.sleep(0.02 * len(jobs))
        texts = [[f"{job.messages[-1]['content']}#{i}" for i in job.sample_indices] for job in jobs]
        with self.log.open("a") as fh:
            fh.writelines(f"{t}\n" for ts in texts for t in ts)
        return [JobOutput(texts=ts, tokens_in=3, tokens_out=len(ts)) for ts in texts]


def _prompts(proc: int) -> list[str]:
    return [f"shared-{i}" for i in range(SHARED)] + [f"own-{proc}-{i}" for i in range(OWN)]


def _writer(folder: str, proc: int, start, errors) -> None:
    """Child process: every shared prompt (in an order of its own) and its own prompts, through one chat()."""
    try:
        cfg = parse_params({"llm": {"cache_path": f"{folder}/cache.sqlite", "claim_poll_s": 0.05,
                                    "roles": {"default": {"model": "m"}}}}).llm
        backend = LoggingBackend(Path(folder) / f"generated-{proc}.txt")
        client = LLMClient(cfg, backends={"llamacpp": lambda c: backend})
        prompts = _prompts(proc)
        prompts = prompts[proc * 5:] + prompts[:proc * 5]  # each process starts somewhere else in the shared set
        requests = [ChatRequest.of([{"role": "user", "content": p}], "p@1", n=SAMPLES, temperature=0.7)
                    for p in prompts]
        start.wait(timeout=120)
        results = client.chat("judge", requests)
        wrong = [p for p, r in zip(prompts, results) if r.texts != [f"{p}#{i}" for i in range(SAMPLES)]]
        if wrong:
            errors.put(f"proc {proc}: wrong or missing replies for {wrong[:3]}")
    except BaseException as err:  # noqa: BLE001 - reported to the parent
        errors.put(f"proc {proc}: {type(err).__name__}: {err}")


def test_concurrent_writers_lose_and_duplicate_no_row(tmp_path):
    ctx = mp.get_context("spawn")
    start, errors = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), p, start, errors)) for p in range(N_PROCS)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0] * N_PROCS
    reported = []
    while not errors.empty():
        reported.append(errors.get())
    assert reported == []

    expected = {f"{p}#{i}" for proc in range(N_PROCS) for p in _prompts(proc) for i in range(SAMPLES)}
    assert len(expected) == (SHARED + N_PROCS * OWN) * SAMPLES
    generated = Counter(line for f in tmp_path.glob("generated-*.txt") for line in f.read_text().splitlines())
    assert set(generated) == expected and set(generated.values()) == {1}  # each sample paid for exactly once
    with sqlite3.connect(tmp_path / "cache.sqlite") as con:
        rows, keys = con.execute("SELECT count(*), count(DISTINCT key) FROM responses").fetchone()
        texts = {t for (t,) in con.execute("SELECT text FROM responses")}
        claims = con.execute("SELECT count(*) FROM claims").fetchone()[0]
        hits, samples = con.execute("SELECT sum(cache_hits), sum(samples) FROM usage").fetchone()
    assert rows == keys == len(expected) and texts == expected  # none lost, none twice
    assert claims == 0
    assert samples == N_PROCS * (SHARED + OWN) * SAMPLES and samples - hits == len(expected)
