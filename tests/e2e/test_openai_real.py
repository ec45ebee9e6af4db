"""The `openai` backend against a REAL OpenAI-compatible server: llama-cpp-python's server on 127.0.0.1,
serving the embedded SmolLM2 GGUF, with an API key. A FaultProxy (tests/faultproxy.py) sits in front of it
where a test needs counting or faults.

llama-cpp-python's server ignores `n` (one choice per call; the backend asks again for the missing samples,
each with its own seed) and takes JSON schemas as {"type": "json_object", "schema": ...}, hence
`json_format: json_object` in the role. It serves one request at a time on one thread.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import dagster as dg
import duckdb
import polars as pl
import pytest
import yaml
from faultproxy import FaultProxy
from openai_asset import ASSET, GROUP, POISON, SCHEMA, build_defs, materialize, questions, run_summary
from process_guard import stop_group

from dagster_project.llm.chat import ChatRequest
from dagster_project.config import load_params
from dagster_project.llm.backends.llamacpp import resolve_gguf
from dagster_project.llm.client import LLMClient

pytestmark = pytest.mark.e2e

KEY_ENV = "CLARIFY_TEST_OPENAI_KEY"
KEY = "sk-clarify-" + secrets.token_hex(12)  # a fresh secret per test session, grepped for below
HERE = Path(__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, base: str, proc: subprocess.Popen, log: Path):
        self.base, self.proc, self.log = base, proc, log

    @property
    def url(self) -> str:
        return f"{self.base}/v1"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """llama_cpp.server on a free loopback port, one thread, API key required."""
    port = _free_port()
    log = tmp_path_factory.mktemp("llama_server") / "server.log"
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(resolve_gguf("smollm2-135m-instruct")),
           "--host", "127.0.0.1", "--port", str(port), "--n_threads", "1", "--n_ctx", "2048",
           "--model_alias", "smollm2", "--api_key", KEY]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:  # stopped (its whole process group) however the fixture ends: not ready, a failed test, an interrupt
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, f"llama_cpp.server exited:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"llama_cpp.server not ready:\n{log.read_text()[-3000:]}"
            try:
                req = urllib.request.Request(f"{base}/v1/models", headers={"Authorization": f"Bearer {KEY}"})
                with urllib.request.urlopen(req, timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        yield Server(base, proc, log)
    finally:
        stop_group(proc, grace_s=20)


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv(KEY_ENV, KEY)


def _params(tmp_path: Path, url: str, name: str = "params.yaml", max_error_rate: float = 0.2, **role) -> str:
    assistant = {"backend": "openai", "model": "smollm2", "base_url": url, "api_key_env": KEY_ENV,
                 "json_format": "json_object", "concurrency": 2, "timeout_s": 30.0, "max_retries": 3, "seed": 5,
                 **role}
    data = {"llm": {"cache_path": str(tmp_path / ".cache" / "llm_cache.sqlite"),
                    "roles": {"default": {"backend": "llamacpp"}, "assistant": assistant}},
            "quality": {"max_error_rate": max_error_rate}}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _reqs(qs: list[str], **sampling) -> list[ChatRequest]:
    return [ChatRequest.of([{"role": "user", "content": q}], "real@1", SCHEMA, **{"max_tokens": 12, **sampling})
            for q in qs]


def test_chat_n_samples_and_json_schema_against_real_server(server, tmp_path):
    with FaultProxy(server.base) as proxy:  # no faults: it only records what the backend sends
        client = LLMClient(load_params(_params(tmp_path, proxy.url)).llm)
        qs = questions(4)
        results = client.chat("assistant", _reqs(qs, n=3, temperature=0.8))
        for r in results:
            assert r.ok, r.error
            assert len(r.texts) == 3 and not r.cached
            assert r.tokens_in > 0 and r.tokens_out > 0
            assert all(json.loads(t)["answer"] in ("yes", "no") for t in r.texts), r.texts  # schema enforced
        sent = [e.body for e in proxy.events]
        # the server answers one choice per call, so the backend asked 3 times per request, one seed per sample
        assert len(sent) == 12
        for q in qs:
            mine = [b for b in sent if b["messages"][-1]["content"] == q]
            assert sorted(b["seed"] for b in mine) == [5, 6, 7]
            assert all(b["response_format"] == {"type": "json_object", "schema": SCHEMA} for b in mine)
            assert all(b["model"] == "smollm2" and b["max_tokens"] == 12 for b in mine)
        again = client.chat("assistant", _reqs(qs, n=3, temperature=0.8))
        assert all(r.cached for r in again) and [r.texts for r in again] == [r.texts for r in results]
        assert len(proxy.events) == 12  # nothing new reached the server
    assert client.cache.stats()["entries"] == 12


def test_concurrency_limit_is_honoured_by_a_real_server_run(server, tmp_path):
    with FaultProxy(server.base) as proxy:
        for limit in (1, 3):
            proxy.reset()
            client = LLMClient(load_params(_params(tmp_path, proxy.url, f"p{limit}.yaml", concurrency=limit,
                                                   seed=limit)).llm)
            results = client.chat("assistant", _reqs(questions(9), max_tokens=6))
            assert all(r.ok for r in results), [r.error for r in results]
            assert len(proxy.events) == 9
            # the server queues requests, so the proxy sees as many in flight as the client allows, no more
            assert proxy.max_inflight == limit


def test_wrong_key_is_refused_and_never_echoed(server, tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-wrong-" + secrets.token_hex(6))
    client = LLMClient(load_params(_params(tmp_path, server.url, max_retries=0)).llm)
    [r] = client.chat("assistant", _reqs(["Is an apple a fruit?"]))
    assert not r.ok and ("401" in r.error or "Authentication" in r.error), r.error
    assert os.environ[KEY_ENV] not in r.error and KEY not in r.error


def _grep_tree(folder: Path, needle: bytes) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_api_key_absent_from_cache_logs_assets_and_metadata(server, tmp_path, monkeypatch, caplog, capfd):
    monkeypatch.chdir(tmp_path)
    params = _params(tmp_path, server.url)
    home = tmp_path / "dagster_home"
    home.mkdir()
    with caplog.at_level("DEBUG"), dg.DagsterInstance.local_temp(str(home)) as instance:
        result = materialize(build_defs(params, 6, 0, tmp_path / "suites"), instance)
        records = instance.get_event_records(dg.EventRecordsFilter(event_type=dg.DagsterEventType.ASSET_MATERIALIZATION))
        stored_meta = [r.asset_materialization.metadata for r in records]
    assert result.success
    summary = run_summary(result)
    assert summary["metadata"]["llm/new_calls"] == 6 and summary["checks_passed"] == [True]
    df = pl.read_parquet(tmp_path / "assets" / GROUP / f"{ASSET}.parquet")
    assert df.height == 6 and set(df["status"]) <= {"ok", "parse_error"}
    needle = KEY.encode()
    assert (tmp_path / ".cache" / "llm_cache.sqlite").exists()
    assert _grep_tree(tmp_path, needle) == []  # cache (+ WAL), Parquet, warehouse.duckdb, Dagster storage
    out, err = capfd.readouterr()
    assert KEY not in out and KEY not in err and KEY not in caplog.text
    assert stored_meta and KEY not in repr(stored_meta) and KEY not in json.dumps(summary, default=str)
    with sqlite3.connect(tmp_path / ".cache" / "llm_cache.sqlite") as con:
        keys = [k for (k,) in con.execute("select key from responses")]
    assert len(keys) == 6 and not any(KEY in k for k in keys)


FAULT_RATES = {"500": 0.06, "429": 0.05, "slow": 0.03, "truncated": 0.05, "nonjson": 0.05, "empty": 0.05}


def test_200_request_asset_run_survives_faults(server, tmp_path, monkeypatch, capsys):
    """R1/R3/R5: transient faults are retried (429 after Retry-After), what still fails becomes llm_error rows,
    the asset check passes under the error budget and fails above it."""
    monkeypatch.chdir(tmp_path)
    n, poison_every = 200, 25  # 8 poisoned questions: always 500, every retry
    proxy = FaultProxy(server.base, seed=11, rates=FAULT_RATES, retry_after_s=2, slow_s=9.0, poison=POISON).start()
    try:
        # the server decodes one request at a time: 2 in flight keep it busy without queueing past the timeout
        # two proxies (two URLs) in front of one server: the runs share the cache on purpose (llm/identity.py)
        params = _params(tmp_path, proxy.url, concurrency=2, timeout_s=8.0, max_retries=4,
                         cache_namespace="one-llama-server")
        t0 = time.monotonic()
        with dg.DagsterInstance.ephemeral() as instance:
            result = materialize(build_defs(params, n, poison_every, tmp_path / "suites"), instance)
        wall = time.monotonic() - t0
        assert result.success
        summary = run_summary(result)
        events = list(proxy.events)
        counts = proxy.counts
    finally:
        proxy.stop()
    df = pl.read_parquet(tmp_path / "assets" / GROUP / f"{ASSET}.parquet")
    assert df.height == n and df["qid"].n_unique() == n  # every question has its row

    poisoned = df.filter(pl.col("question").str.contains(POISON, literal=True))
    assert poisoned.height == 8
    assert (poisoned["status"] == "llm_error").all()
    assert poisoned["error"].str.contains("InternalServerError").all(), poisoned["error"].to_list()
    errors = df.filter(pl.col("status") == "llm_error")
    assert errors["error"].is_not_null().all()
    assert errors.height - poisoned.height <= 3  # a healthy question fails only if all 5 attempts are faults
    assert summary["checks_passed"] == [True]  # 8-11 errors out of 200 <= 0.2
    assert summary["metadata"]["llm/errors"] == errors.height

    # every fault kind happened, and each failed attempt was retried
    assert all(counts[k] > 0 for k in FAULT_RATES), counts
    per_prompt: dict[str, list] = {}
    for e in events:
        per_prompt.setdefault(e.prompt, []).append(e)
    assert len(per_prompt) == n
    assert all(len(per_prompt[q]) == 5 for q in poisoned["question"])  # 1 try + max_retries=4
    retried = len(events) - n
    faults = sum(counts[k] for k in FAULT_RATES)
    assert retried >= faults - errors.height  # every fault was retried, except each failed row's last attempt
    # a 429 is retried no sooner than its Retry-After (2 s); plain backoff starts at ~1 s
    waits = []
    for evs in per_prompt.values():
        for a, b in zip(evs, evs[1:]):
            if a.kind == "429":
                waits.append(b.t - a.t)
    assert waits and min(waits) >= 1.95, waits

    # DuckDB sees the whole table through its view
    with duckdb.connect(str(tmp_path / "assets" / "warehouse.duckdb"), read_only=True) as con:
        assert con.execute(f"select count(*) from {GROUP}.{ASSET}").fetchone()[0] == n

    with capsys.disabled():
        print(f"\n[fault run] {n} questions, {len(events)} HTTP requests ({retried} retries), faults {dict(counts)}, "
              f"llm_error rows {errors.height} ({poisoned.height} poisoned), {wall:.0f} s")

    # the same run with a tighter error budget: answered calls come from the cache, the poisoned ones fail
    # again (no other faults this time), and the check flags the error rate
    with FaultProxy(server.base, poison=POISON) as strict_proxy:
        strict = _params(tmp_path, strict_proxy.url, "strict.yaml", max_error_rate=0.01, concurrency=2,
                         timeout_s=60.0, max_retries=1, cache_namespace="one-llama-server")
        with dg.DagsterInstance.ephemeral() as instance:
            again = materialize(build_defs(strict, n, poison_every, tmp_path / "suites"), instance)
        asked = set(strict_proxy.requests_per_prompt())
    assert asked == set(errors["question"])  # only the failed rows were asked again
    s2 = run_summary(again)
    assert s2["checks_passed"] == [False]
    assert s2["metadata"]["llm/cache_hits"] == n - errors.height
    assert s2["metadata"]["llm/errors"] == poisoned.height


def test_kill9_midway_then_rerun_serves_answered_calls_from_cache(server, tmp_path, monkeypatch, capsys):
    """A materialization killed with SIGKILL halfway loses no answered call and leaves no partial Parquet."""
    monkeypatch.chdir(tmp_path)  # the DuckDB views hold paths relative to the project root
    n = 40
    with FaultProxy(server.base) as proxy:
        params = _params(tmp_path, proxy.url, concurrency=2)
        env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}  # the script uses an ephemeral instance
        cmd = [sys.executable, str(HERE / "openai_asset.py"), params, str(n), "0", str(tmp_path / "suites")]
        cache = tmp_path / ".cache" / "llm_cache.sqlite"

        def cached_rows() -> int:
            if not cache.exists():
                return 0
            with sqlite3.connect(f"file:{cache}?mode=ro", uri=True, timeout=30) as con:
                try:
                    return con.execute("select count(*) from responses").fetchone()[0]
                except sqlite3.OperationalError:
                    return 0

        log = tmp_path / "killed_run.log"
        with open(log, "wb") as fh:  # a file, not a pipe: a full pipe would stall the child
            proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=fh, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        try:
            while cached_rows() < 16:  # two committed chunks of 8 requests
                assert proc.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, "materialization made no progress"
                time.sleep(0.2)
        finally:  # the kill this test is about (SIGKILL), and the run's end if the wait above failed
            proc.kill()
            proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        answered = cached_rows()
        assert 16 <= answered < n
        # nothing half-written is visible: no asset file yet, and every *.parquet that exists reads whole
        assert not (tmp_path / "assets" / GROUP / f"{ASSET}.parquet").exists()
        for f in (tmp_path / "assets").rglob("*.parquet") if (tmp_path / "assets").exists() else []:
            duckdb.execute(f"select count(*) from read_parquet('{f}')").fetchone()

        sent_before = len(proxy.events)
        rerun = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
        summary = json.loads(rerun.stdout.split("RUN_JSON ", 1)[1].splitlines()[0])
        new_requests = len(proxy.events) - sent_before
    meta = summary["metadata"]
    assert meta["llm/cache_hits"] == answered  # every call answered before the kill came from the cache
    assert meta["llm/new_calls"] == n - answered == new_requests
    df = pl.read_parquet(tmp_path / "assets" / GROUP / f"{ASSET}.parquet")
    assert df.height == n and df["cached"].sum() == answered
    with duckdb.connect(str(tmp_path / "assets" / "warehouse.duckdb"), read_only=True) as con:
        assert con.execute(f"select count(*) from {GROUP}.{ASSET}").fetchone()[0] == n
    with capsys.disabled():
        print(f"\n[kill -9] {answered}/{n} calls answered before the kill, served from the cache on rerun; "
              f"{new_requests} new requests")
