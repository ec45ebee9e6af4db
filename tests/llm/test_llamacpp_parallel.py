"""RoleConfig.parallel in the llama.cpp backend: requests spread over several contexts, each answered once on the
calling thread, a dialogue's turns kept on one context; and on the real SmolLM2-135M, the same replies as one
context."""

from __future__ import annotations

import threading
import time

import pytest

from dagster_project.config import RoleConfig
from dagster_project.llm.backends.base import Job
from dagster_project.llm.backends.llamacpp import BusyClock, LlamaCppBackend, affinity, assign


def job(system: str, user: str, *later: str, schema: dict | None = None, temperature: float = 0.0,
        samples: int = 1) -> Job:
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    msgs += [{"role": "assistant" if k % 2 == 0 else "user", "content": t} for k, t in enumerate(later)]
    return Job(messages=tuple(msgs), json_schema=schema, sample_indices=list(range(samples)),
               sampling={"temperature": temperature, "top_p": 0.9, "max_tokens": 24, "seed": 7})


class EchoLlama:
    """A context that answers with the last user message, slowly enough for the other context to work too."""

    def __init__(self, name: str):
        self.name, self.threads, self.served, self.served_with = name, None, [], []

    def use_threads(self, n: int) -> None:
        self.threads = n

    def create_chat_completion(self, messages, **kw):
        self.served_with.append(self.threads)
        time.sleep(0.01)
        self.served.append(messages[-1]["content"])
        return {"choices": [{"message": {"content": f"{self.name}:{messages[-1]['content']}"},
                             "finish_reason": "stop"}], "usage": {"prompt_tokens": 2, "completion_tokens": 1}}

    def remember(self) -> None:
        pass


def fake_backend(contexts: int, threads: int = 2) -> LlamaCppBackend:
    backend = LlamaCppBackend.__new__(LlamaCppBackend)
    backend.llms = [EchoLlama(f"c{w}") for w in range(contexts)]
    backend.threads, backend.parallel = threads, contexts
    return backend


def test_every_job_is_answered_once_on_the_calling_thread_by_both_contexts():
    backend = fake_backend(2)
    jobs = [job("s", f"u{i}") for i in range(9)]
    seen: list[tuple[int, str, str]] = []
    backend.generate_each(jobs, lambda i, out: seen.append((i, out.texts[0], threading.current_thread().name)))
    assert sorted(i for i, _, _ in seen) == list(range(9))
    assert {name for _, _, name in seen} == {threading.current_thread().name}
    assert all(text.endswith(f":u{i}") for i, text, _ in seen)
    assert all(llm.served and llm.served_with[0] == 1 for llm in backend.llms)  # 2 threads split over 2 contexts


def test_a_context_done_with_its_share_gives_its_threads_to_the_one_still_decoding():
    """Without it, a call's tail (the longer share) ran on one core of two; a thread count never changes a reply."""

    class WaitsForLend(EchoLlama):
        def create_chat_completion(self, messages, **kw):
            if len(self.served) == 5:  # the long job's last sample waits (5 s at most) for the other's threads
                deadline = time.monotonic() + 5
                while self.threads != 2 and time.monotonic() < deadline:
                    time.sleep(0.005)
            return super().create_chat_completion(messages, **kw)

    backend = fake_backend(2)
    backend.llms = [WaitsForLend(f"c{w}") for w in range(2)]
    short = job("s", "short")
    long = next(j for i in range(50) if affinity(j := job("s", f"long{i}", samples=6), 2) != affinity(short, 2))
    outs = backend.generate([short, long])
    assert outs[0].texts[0].endswith(":short") and len(outs[1].texts) == 6
    [other] = [llm for llm in backend.llms if len(llm.served) == 1]
    [busy] = [llm for llm in backend.llms if len(llm.served) == 6]
    assert other.served_with == [1] and busy.served_with[-1] == 2  # 1 thread each, then both to the long job


def test_a_single_job_runs_on_one_context_with_every_thread():
    backend = fake_backend(2)
    [out] = backend.generate([job("s", "only")])
    assert out.texts == ["c0:only"] and backend.llms[0].threads == 2 and not backend.llms[1].served


def test_a_second_context_that_fails_to_load_leaves_the_work_to_the_first(caplog):
    class OneLoads(LlamaCppBackend):
        def _new_context(self):
            raise MemoryError("failed to allocate KV cache")

    backend = OneLoads.__new__(OneLoads)
    backend.llms, backend.threads, backend.parallel = [EchoLlama("c0")], 2, 2
    outs = backend.generate([job("s", f"u{i}") for i in range(3)])
    assert [o.texts for o in outs] == [["c0:u0"], ["c0:u1"], ["c0:u2"]] and backend.llms[0].threads == 2
    assert "context 2 of 2 failed to load (MemoryError: failed to allocate KV cache); 1 carry the work" in caplog.text


def test_a_dialogues_turns_go_to_the_same_context():
    first = job("system", "plan a trip")
    later = job("system", "plan a trip", "where to?", "somewhere warm")
    assert affinity(first, 2) == affinity(later, 2)
    assert len({affinity(job("system", f"request {i}"), 2) for i in range(20)}) == 2  # and dialogues spread


def test_assign_spreads_samples_evenly_keeps_order_and_depends_on_the_jobs_alone():
    jobs = [job("s", f"u{i}", samples=1 + i % 3) for i in range(11)]
    lists = assign(jobs, 2)
    assert sorted(i for mine in lists for i in mine) == list(range(11))
    assert all(mine == sorted(mine) for mine in lists)  # each context answers its jobs in the call's order
    loads = [sum(len(jobs[i].sample_indices) for i in mine) for mine in lists]
    assert abs(loads[0] - loads[1]) <= 3  # 22 samples: within one job of an even split
    assert assign(jobs, 2) == lists  # no timing involved: the next run sends every context the same prompts


def test_busy_clock_shares_overlapping_requests_so_they_sum_to_the_busy_wall_time():
    now = [0.0]
    clock = BusyClock(lambda: now[0])
    a = clock.start()               # t=0: a alone
    now[0] = 2.0
    b = clock.start()               # t=2: a and b decode together
    now[0] = 6.0
    charge_a = clock.stop(a)        # t=6: a ends, b alone
    now[0] = 7.0
    charge_b = clock.stop(b)
    assert (charge_a, charge_b) == (4.0, 3.0)  # 2 + 4/2 and 4/2 + 1
    now[0] = 9.0                    # idle: nobody charged
    c = clock.start()
    now[0] = 10.0
    assert clock.stop(c) == 1.0 and charge_a + charge_b == 7.0  # the wall time of 0..7


llama_cpp = pytest.importorskip("llama_cpp")


def test_two_contexts_give_the_same_replies_as_one():
    """Greedy, seeded sampling (two samples) and grammar-constrained JSON: each context decodes alone, so its
    replies are those of a single context with every thread."""
    schema = {"type": "object", "properties": {"clarify": {"type": "boolean"}}, "required": ["clarify"]}
    system = "Decide whether the request is ambiguous; if it is, ask one short clarifying question."
    jobs = [job(system, "Book me a table."), job(system, "What is 2 + 2?", schema=schema),
            job(system, "Tell me about jaguars.", temperature=0.8, samples=2), job(system, "Fix my code."),
            job(system, "Plan a trip.", "Where to?", "Somewhere warm."), job(system, "Which laptop?", schema=schema)]
    replies = {}
    for parallel in (1, 2):
        backend = LlamaCppBackend(RoleConfig(n_ctx=1024, n_threads=2, quantize="q8_0", parallel=parallel))
        outs = backend.generate(jobs)
        assert all(o.error is None for o in outs), [o.error for o in outs]
        assert len(backend.llms) == parallel
        replies[parallel] = [o.texts for o in outs]
        for llm in backend.llms:
            llm.close()
    assert replies[1] == replies[2]
    assert len(replies[2][2]) == 2 and all(any(t.strip() for t in texts) for texts in replies[2])
