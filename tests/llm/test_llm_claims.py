"""Claims in the LLM cache (llm/cache.py + client.py): concurrent runs of the same uncached calls pay once."""

from __future__ import annotations

import threading
import time
from collections import Counter

from fakes import ScriptedBackend

from dagster_project.config import parse_params
from dagster_project.llm.backends.base import Job, JobOutput
from dagster_project.llm.cache import LLMCache
from dagster_project.llm.chat import ChatRequest, sample_cache_key
from dagster_project.llm.client import LLMClient
from dagster_project.llm.identity import cache_identity


class CountingBackend(ScriptedBackend):
    """Counts every sample it generates (thread-safe) and takes `delay_s` per job, so runs overlap."""

    chunk_size = 2

    def __init__(self, delay_s: float = 0.05, fail_first: int = 0):
        super().__init__(lambda job, i: f"{job.messages[-1]['content']}#{i}")
        self.delay_s, self.fail_first = delay_s, fail_first
        self.samples: Counter[str] = Counter()
        self.lock = threading.Lock()

    def generate(self, jobs: list[Job]) -> list[JobOutput]:
        time.sleep(self.delay_s * len(jobs))
        with self.lock:
            for job in jobs:
                self.samples.update(f"{job.messages[-1]['content']}#{i}" for i in job.sample_indices)
            if self.fail_first > 0:
                self.fail_first -= 1
                return [JobOutput(error="server down") for _ in jobs]
        return super().generate(jobs)


def _config(tmp_path, lease_s: float = 30.0):
    return parse_params({"llm": {"cache_path": str(tmp_path / "c.sqlite"), "claim_lease_s": lease_s,
                                 "claim_poll_s": 0.05, "roles": {"default": {"model": "m"}}}}).llm


REQUESTS = [ChatRequest.of([{"role": "user", "content": f"q{i}"}], "p@1", n=2, temperature=0.7) for i in range(8)]


def _run_concurrently(clients: list[LLMClient]) -> list[list]:
    start = threading.Barrier(len(clients))
    out: list[list] = [[] for _ in clients]

    def run(k: int) -> None:
        start.wait()
        out[k] = clients[k].chat("judge", REQUESTS)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return out


def test_two_concurrent_runs_of_the_same_uncached_calls_pay_once(tmp_path):
    backend = CountingBackend()
    cfg = _config(tmp_path)
    a, b = _run_concurrently([LLMClient(cfg, backends={"llamacpp": lambda c: backend}) for _ in range(2)])
    assert sum(backend.samples.values()) == 16 and set(backend.samples.values()) == {1}  # 8 requests x 2 samples
    assert [r.texts for r in a] == [r.texts for r in b] == [[f"q{i}#0", f"q{i}#1"] for i in range(8)]
    assert all(r.ok for r in a + b)
    # whoever waited counts the other's replies as cache hits
    assert sum(r.cache_hits for r in a + b) == 16


def test_a_claim_outlives_its_lease_while_the_owner_still_works(tmp_path):
    """The owner renews its claims: a waiter does not take over a slow but live run (lease 1 s, ~4 s run; the
    margins leave a loaded CI machine time to run the heartbeat)."""
    backend = CountingBackend(delay_s=0.5)
    cfg = _config(tmp_path, lease_s=1.0)
    a, b = _run_concurrently([LLMClient(cfg, backends={"llamacpp": lambda c: backend}) for _ in range(2)])
    assert sum(backend.samples.values()) == 16 and all(r.ok for r in a + b) and len(a) == len(b) == 8


def test_an_expired_claim_of_a_killed_run_is_taken_over(tmp_path):
    cfg = _config(tmp_path)
    role = cfg.role("judge")
    client = LLMClient(cfg, backends={"llamacpp": lambda c: backend})
    keys = [sample_cache_key(cache_identity(role), r, client.resolve(role, r), i) for r in REQUESTS for i in range(2)]
    cache = LLMCache(cfg.cache_path)
    assert cache.claim(keys, "killed-run", lease_s=0.4) == set(keys)  # then it died: nobody renews
    assert cache.claim(keys, "someone-else", lease_s=10) == set()  # held while the lease runs
    backend = CountingBackend(delay_s=0.0)
    t0 = time.monotonic()
    results = client.chat("judge", REQUESTS)
    assert time.monotonic() - t0 >= 0.3  # it waited for the lease, then took every key over
    assert all(r.ok for r in results) and sum(backend.samples.values()) == 16


def test_failed_samples_release_their_claims_for_the_next_run(tmp_path):
    backend = CountingBackend(fail_first=100)  # the first run's every chunk fails
    cfg = _config(tmp_path)
    first = LLMClient(cfg, backends={"llamacpp": lambda c: backend}).chat("judge", REQUESTS)
    assert all(r.error for r in first)
    backend.fail_first = 0
    again = LLMClient(cfg, backends={"llamacpp": lambda c: backend}).chat("judge", REQUESTS)
    assert all(r.ok for r in again)
    with LLMCache(cfg.cache_path)._conn() as con:
        assert con.execute("SELECT count(*) FROM claims").fetchone()[0] == 0  # nothing left claimed
