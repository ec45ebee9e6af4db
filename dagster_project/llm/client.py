"""LLM access by role: role -> cache -> backend (llamacpp | openai | vllm), batch-first, never raising per row."""

from __future__ import annotations

import os
import socket
import sqlite3
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from typing import Any, Protocol

from tqdm import tqdm

from dagster_project.config import LLMConfig, RoleConfig
from dagster_project.llm.backends import BACKENDS
from dagster_project.llm.backends.base import (
    Backend,
    Job,
    JobOutput,
    Progress,
    short_error,
)
from dagster_project.llm.cache import LLMCache
from dagster_project.llm.chat import (
    ChatRequest,
    ChatResult,
    parse_usage_key,
    sample_cache_key,
    usage_key,
    usage_summary,
)
from dagster_project.llm.identity import cache_identity
from dagster_project.llm.redact import Redactor
from dagster_project.llm.trained import TRAINING_PREFIX


def single_resident(cfg: RoleConfig) -> str | None:
    """The kind of in-process weights kept one model at a time (a new model of the kind replaces the last in
    memory): transformers models, and llama.cpp serving a trained model (with an adapter it reads the whole file,
    no mmap); None for the rest."""
    if cfg.backend == "transformers":
        return "transformers"
    return "llamacpp-trained" if cfg.backend == "llamacpp" and cfg.model.startswith(TRAINING_PREFIX) else None


class DryRun(Protocol):
    """The client's planning hook: answers the samples the cache could not, instead of any backend.

    Its answers are neither cached nor counted as usage (see llm/plan.py, behind `clarify plan`)."""

    def answer(self, role: str, cfg: RoleConfig, jobs: list[Job], keys: list[list[str]], tag: str) -> list[list[str]]:
        """One text per sample index of each job; keys are the cache keys of each job's samples."""
        ...

    def count(self, role: str, cfg: RoleConfig, requests: list[ChatRequest], results: list[ChatResult],
              tag: str) -> None:
        """Called once per chat() with every request and its (cached or dry-run) result."""
        ...


class _ResultSink:
    """Backend outputs -> ChatResults, with the answered samples buffered until the next cache commit."""

    def __init__(self, cache: LLMCache, model: str, keys: list[list[str]], results: list[ChatResult],
                 pending: list[tuple[int, Job]], redact: Redactor):
        self.cache, self.model, self.keys, self.results, self.pending = cache, model, keys, results, pending
        self.redact = redact
        self.rows: list[tuple[str, str, str, int, int, bool]] = []
        self.taken = [False] * len(pending)
        self.done = self.errors = 0

    def open_jobs(self) -> list[int]:
        return [j for j, t in enumerate(self.taken) if not t]

    def take(self, j: int, out: JobOutput, latency_s: float) -> None:
        """Store one job's output; its model time is the backend's own measure, else its whole latency."""
        i, job = self.pending[j]
        self.taken[j] = True
        self.done += 1
        res = self.results[i]
        res.latency_s += latency_s
        res.model_s += latency_s if out.model_s is None else out.model_s
        if out.error or len(out.texts) != len(job.sample_indices):
            res.error = self.redact(out.error) or f"backend returned {len(out.texts)} of {len(job.sample_indices)} samples"
            self.errors += 1
            return
        res.tokens_in += out.tokens_in
        res.tokens_out += out.tokens_out
        share_in = out.tokens_in // len(job.sample_indices)
        share_out = out.tokens_out // len(job.sample_indices)
        cut = out.truncated or [False] * len(out.texts)
        for idx, text, truncated in zip(job.sample_indices, map(self.redact, out.texts), cut, strict=True):
            res.texts[idx], res.truncated[idx] = text, truncated
            self.rows.append((self.keys[i][idx], self.model, text, share_in, share_out, truncated))

    def commit(self) -> None:
        if self.rows:
            self.cache.put_many(self.rows)
            self.rows = []


class LLMClient:
    """chat(role, requests) -> one ChatResult per request, in order. Cache first, then the role's backend."""

    def __init__(self, config: LLMConfig, backends: dict[str, Callable[[RoleConfig], Backend]] | None = None,
                 dry_run: DryRun | None = None):
        self.config = config
        self._factories = backends or BACKENDS
        self._backends: dict[str, Backend] = {}
        self._cache: LLMCache | None = None
        self.dry_run = dry_run
        every = [*config.roles.values(), *config.subjects.values()]
        self.redact = Redactor(r.api_key_env for r in every if r.api_key_env)  # any role's key, in any text

    @property
    def cache(self) -> LLMCache:
        """Opened on first use, so loading the definitions (e.g. in the UI) creates no cache file."""
        if self._cache is None:
            self._cache = LLMCache(self.config.cache_path)
        return self._cache

    def backend(self, cfg: RoleConfig) -> Backend:
        key = cfg.model_dump_json()  # the whole role config: key, limits and engine settings are per role
        if key not in self._backends:
            kind = single_resident(cfg)
            if kind:  # one evaluation run serves many trained models, one after another
                for old in [k for k in self._backends if single_resident(RoleConfig.model_validate_json(k)) == kind]:
                    del self._backends[old]
            self._backends[key] = self._factories[cfg.backend](cfg)
        return self._backends[key]

    def resolve(self, cfg: RoleConfig, req: ChatRequest) -> dict[str, Any]:
        s = req.sampling
        return {
            "temperature": cfg.temperature if s.temperature is None else s.temperature,
            "top_p": cfg.top_p if s.top_p is None else s.top_p,
            "max_tokens": cfg.max_tokens if s.max_tokens is None else s.max_tokens,
            "seed": cfg.seed if s.seed is None else s.seed,
        }

    def chat(self, role: str, requests: list[ChatRequest], progress: Progress | None = None,
             tag: str = "") -> list[ChatResult]:
        """One result per request, in order; `tag` names the caller (an asset) for the dry-run hook.

        Uncached samples are claimed in the cache before they are sent: samples another run has claimed
        are waited for (polling the cache) rather than paid twice, and taken over if that claim expires."""
        cfg = self.config.role(role)
        label = f"{role} [{cfg.backend}:{cfg.model}]"
        resolved = [self.resolve(cfg, r) for r in requests]
        ident = cache_identity(cfg)
        keys = [[sample_cache_key(ident, r, s, i) for i in range(r.sampling.n)] for r, s in zip(requests, resolved)]
        results = [ChatResult(texts=[""] * r.sampling.n, truncated=[False] * r.sampling.n, model=cfg.model)
                   for r in requests]
        open_ = {i: list(range(len(ks))) for i, ks in enumerate(keys)}
        hit_tokens = [0, 0]
        open_ = self._serve_cached(open_, keys, results, hit_tokens)
        for i, r in enumerate(results):
            r.cached = i not in open_
        say = progress or (lambda m: None)
        say(f"{label}: {len(requests)} requests, {len(requests) - len(open_)} fully cached, {len(open_)} to generate")
        if self.dry_run is not None:
            pending = self._jobs(open_, requests, resolved)
            answers = self.dry_run.answer(role, cfg, [job for _, job in pending], [keys[i] for i, _ in pending], tag)
            for (i, job), texts in zip(pending, answers, strict=True):
                for idx, text in zip(job.sample_indices, texts, strict=True):
                    results[i].texts[idx] = text
            self.dry_run.count(role, cfg, requests, results, tag)
            say(f"{label}: dry run: {len(pending)} requests would be sent")
            return results
        owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
        told = 0
        try:
            while open_:
                claimed = self.cache.claim([keys[i][j] for i, js in open_.items() for j in js], owner,
                                           self.config.claim_lease_s)
                mine = {i: [j for j in js if keys[i][j] in claimed] for i, js in open_.items()}
                mine = {i: js for i, js in mine.items() if js}
                if mine:
                    self._run(cfg, label, self._jobs(mine, requests, resolved), keys, results, say, owner)
                open_ = {i: [j for j in js if keys[i][j] not in claimed] for i, js in open_.items()}
                open_ = self._serve_cached({i: js for i, js in open_.items() if js}, keys, results, hit_tokens)
                if open_:
                    if (waiting := sum(map(len, open_.values()))) != told:  # said once per change, not per poll
                        say(f"{label}: waiting for {waiting} samples another run is generating")
                        told = waiting
                    time.sleep(self.config.claim_poll_s)
        finally:
            self.cache.release(owner)
        for r in results:
            r.cached = r.cache_hits == len(r.texts)  # waited-for replies another run paid for count as hits
        self._record(role, cfg, results, *hit_tokens)
        return results

    def _serve_cached(self, open_: dict[int, list[int]], keys: list[list[str]], results: list[ChatResult],
                      hit_tokens: list[int]) -> dict[int, list[int]]:
        """Fill the open samples the cache holds; return those still open (request -> sample indices)."""
        hit = self.cache.get_many([keys[i][j] for i, js in open_.items() for j in js]) if open_ else {}
        still: dict[int, list[int]] = {}
        for i, js in open_.items():
            for j in js:
                if keys[i][j] not in hit:
                    still.setdefault(i, []).append(j)
                    continue
                text, tin, tout, truncated = hit[keys[i][j]]
                res = results[i]
                res.texts[j], res.truncated[j] = text, truncated
                res.tokens_in, res.tokens_out, res.cache_hits = res.tokens_in + tin, res.tokens_out + tout, res.cache_hits + 1
                hit_tokens[0], hit_tokens[1] = hit_tokens[0] + tin, hit_tokens[1] + tout
        return still

    @staticmethod
    def _jobs(open_: dict[int, list[int]], requests: list[ChatRequest],
              resolved: list[dict[str, Any]]) -> list[tuple[int, Job]]:
        return [(i, Job(requests[i].messages, resolved[i], js, requests[i].json_schema)) for i, js in sorted(open_.items())]

    def _record(self, role: str, cfg: RoleConfig, results: list[ChatResult], hit_in: int, hit_out: int) -> None:
        """Per-role accounting for `clarify doctor`; a failure here never fails the call."""
        try:
            self.cache.record_usage(
                role, cfg.backend, cfg.model, len(results), sum(len(r.texts) for r in results),
                sum(r.cache_hits for r in results), sum(1 for r in results if r.error),
                sum(r.tokens_in for r in results) - hit_in, sum(r.tokens_out for r in results) - hit_out)
        except Exception:  # noqa: BLE001, S110 - accounting is best effort
            pass

    def _run(self, cfg: RoleConfig, label: str, pending: list[tuple[int, Job]], keys: list[list[str]],
             results: list[ChatResult], say: Progress, owner: str) -> None:
        """Generate the owner's claimed samples, renewing its claims every third of a lease meanwhile."""
        stop = threading.Event()
        lease = self.config.claim_lease_s

        def heartbeat() -> None:
            while not stop.wait(lease / 3):
                try:
                    self.cache.renew(owner, lease)
                except sqlite3.Error:  # a busy database: the next beat tries again
                    continue

        beat = threading.Thread(target=heartbeat, name="llm-claims", daemon=True)
        beat.start()
        try:
            self._generate(cfg, label, pending, keys, results, say)
        finally:
            stop.set()
            beat.join()
            self.cache.release(owner)

    def _generate(self, cfg: RoleConfig, label: str, pending: list[tuple[int, Job]], keys: list[list[str]],
                  results: list[ChatResult], say: Progress) -> None:
        try:
            backend = self.backend(cfg)
        except Exception as err:  # noqa: BLE001 - a broken backend fails rows, not the process
            for i, _ in pending:
                results[i].error = self.redact(f"backend unavailable: {short_error(err)}")
            say(self.redact(f"{label}: backend unavailable: {err}") or "")
            return
        step = max(1, backend.chunk_size)
        t0 = time.monotonic()
        bar = tqdm(total=len(pending), desc=label, file=sys.stderr, disable=None, leave=False)
        sink = _ResultSink(self.cache, cfg.model, keys, results, pending, self.redact)

        def report() -> None:
            rate = sink.done / max(time.monotonic() - t0, 1e-9)
            with tqdm.external_write_mode(file=sys.stderr):  # clears the bar, writes, redraws it below
                say(f"{label}: {sink.done}/{len(pending)} generated ({sink.errors} errors, {rate:.2f} req/s)")

        if hasattr(backend, "generate_each"):
            # every job in flight at once; answers are committed every `step` completions (and at the end),
            # so one slow or failing request never holds back the others
            def on_done(j: int, out: JobOutput) -> None:
                sink.take(j, out, out.latency_s or 0.0)
                bar.update(1)
                if sink.done % step == 0:
                    sink.commit()
                    report()

            try:
                backend.generate_each([job for _, job in pending], on_done)
            except Exception as err:  # noqa: BLE001 - backends should not raise; if one does, fail the open rows
                for j in sink.open_jobs():
                    sink.take(j, JobOutput(error=short_error(err)), 0.0)
            sink.commit()
            report()
        else:
            for start in range(0, len(pending), step):
                t = time.monotonic()
                try:
                    outs = backend.generate([job for _, job in pending[start:start + step]])
                except Exception as err:  # noqa: BLE001 - backends should not raise; if one does, fail the chunk
                    outs = [JobOutput(error=short_error(err)) for _ in pending[start:start + step]]
                per = (time.monotonic() - t) / max(len(outs), 1)
                for j, out in enumerate(outs, start):
                    sink.take(j, out, per)
                sink.commit()  # committed per chunk: a killed run keeps everything answered so far
                bar.update(len(outs))
                report()
        bar.close()

    def usage(self, role: str, results: list[ChatResult]) -> dict[str, float | int]:
        """`llm/<role>/<metric>` usage of one role's results, priced with that role's params."""
        cfg = self.config.role(role)
        return usage_summary(results, cfg.price_in_per_mtok, cfg.price_out_per_mtok, role=role)




class LLMSession:
    """chat(role, requests) for one asset execution: the one place usage is recorded (per role, for metadata)."""

    def __init__(self, client: LLMClient, progress: Progress | None = None, tag: str = ""):
        self.client, self.progress, self.tag = client, progress, tag
        self.results: dict[str, list[ChatResult]] = defaultdict(list)

    def __call__(self, role: str, requests: list[ChatRequest]) -> list[ChatResult]:
        if not requests:
            return []
        out = self.client.chat(role, requests, self.progress, self.tag)
        self.results[role].extend(out)
        return out

    def usage(self) -> dict[str, float | int]:
        """Per role `llm/<role>/<metric>` and, over all roles, `llm/<metric>` (llm.chat.usage_key): requests,
        samples, cache hits, tokens, errors, cost."""
        meta: dict[str, float | int] = {}
        every: list[ChatResult] = []
        for role, results in self.results.items():
            meta |= self.client.usage(role, results)
            every.extend(results)
        cost = sum(v for k, v in meta.items() if (parsed := parse_usage_key(k)) and parsed[1] == "est_cost_usd")
        return meta | usage_summary(every) | {usage_key("est_cost_usd"): round(cost, 4)}
