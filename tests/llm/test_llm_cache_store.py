"""LLMCache (llm/cache.py) and its keys: no secrets in the file, WAL, all-or-nothing batches."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from dagster_project.llm.chat import ChatRequest
from dagster_project.config import parse_params
from dagster_project.llm.client import LLMClient
from dagster_project.llm.cache import LLMCache
from fakes import ScriptedBackend  # tests/fakes.py, on sys.path via tests/conftest.py

SECRET = "sk-TOPSECRET-5f1e0c9a77d2"
URL_A = "https://secret-gateway.internal.example:8443/v1"
URL_B = "http://127.0.0.1:9/other/v1"


def _cache_bytes(cache_path: Path) -> bytes:
    """The database and whatever is still in its WAL / shm files."""
    return b"".join(p.read_bytes() for p in sorted(cache_path.parent.glob(cache_path.name + "*")))


def test_cache_file_holds_no_key_or_url_and_other_endpoints_miss(tmp_path, monkeypatch):
    monkeypatch.setenv("CLARIFY_TEST_KEY_A", SECRET)
    monkeypatch.setenv("CLARIFY_TEST_KEY_B", "sk-another-key-0000")
    cache_path = tmp_path / "cache" / "llm.sqlite"
    params = parse_params({"llm": {
        "cache_path": str(cache_path),
        "roles": {
            "default": {"model": "local-small"},
            "judge": {"backend": "openai", "model": "gpt-test", "base_url": URL_A,
                      "api_key_env": "CLARIFY_TEST_KEY_A", "timeout_s": 17.0},
            "reasoner": {"backend": "openai", "model": "gpt-test", "base_url": URL_B,
                         "api_key_env": "CLARIFY_TEST_KEY_B", "timeout_s": 99.0, "max_retries": 0,
                         "concurrency": 1},
            "clarifier": {"backend": "openai", "model": "gpt-other", "base_url": URL_A,
                          "api_key_env": "CLARIFY_TEST_KEY_A"},
        },
    }})
    backend = ScriptedBackend(lambda job, i: f"reply-to-{job.messages[-1]['content']}-{i}")
    built = []

    def factory(cfg):
        built.append(cfg)
        return backend

    client = LLMClient(params.llm, backends={"openai": factory})
    requests = [ChatRequest.of([{"role": "user", "content": f"question {i}"}], "p@1", n=2) for i in range(3)]
    first = client.chat("judge", requests)
    assert all(r.ok and not r.cached for r in first)
    assert built[0].api_key_env == "CLARIFY_TEST_KEY_A"  # the secret was reachable by the backend

    data = _cache_bytes(cache_path)
    assert b"reply-to-question 2-1" in data  # sanity: replies are readable in these bytes
    assert SECRET.encode() not in data
    assert URL_A.encode() not in data
    assert b"secret-gateway" not in data
    assert b"CLARIFY_TEST_KEY_A" not in data

    # another endpoint serving a model of the same name is a miss: it is asked itself
    backend.jobs.clear()
    via_b = client.chat("reasoner", requests)
    assert len(backend.jobs) == 3 and not any(r.cached for r in via_b)

    # ... and a brand-new client (new process) whose judge points at a closed port gets no cached "ok"
    moved = parse_params({"llm": {
        "cache_path": str(cache_path),
        "roles": {"default": {"model": "local-small"},
                  "judge": {"backend": "openai", "model": "gpt-test", "base_url": "http://127.0.0.1:9/v1",
                            "timeout_s": 1.0, "max_retries": 0}},
    }})
    again = LLMClient(moved.llm).chat("judge", requests)  # the real openai backend
    assert all(r.error and not r.cached and r.cache_hits == 0 for r in again)

    # the same endpoint with another key and timeout is a hit; so is the same URL spelled differently
    respelled = parse_params({"llm": {
        "cache_path": str(cache_path),
        "roles": {"default": {"model": "local-small"},
                  "judge": {"backend": "openai", "model": "gpt-test", "base_url": URL_A.upper().replace("/V1", "/v1/"),
                            "api_key_env": "CLARIFY_TEST_KEY_B", "timeout_s": 3.0}},
    }})
    fresh = ScriptedBackend(lambda job, i: "never")
    same = LLMClient(respelled.llm, backends={"openai": lambda cfg: fresh}).chat("judge", requests)
    assert fresh.jobs == [] and all(r.cached for r in same)

    # negative control: another model behind the same endpoint and key is a miss
    backend.jobs.clear()
    [other] = client.chat("clarifier", requests[:1])
    assert not other.cached and len(backend.jobs) == 1


def test_roles_sharing_a_cache_namespace_share_replies_across_urls(tmp_path):
    def params(url: str, namespace: str | None) -> object:
        judge = {"backend": "openai", "model": "qwen", "base_url": url}
        return parse_params({"llm": {"cache_path": str(tmp_path / "c.sqlite"), "roles": {
            "default": {"model": "m"}, "judge": judge | ({"cache_namespace": namespace} if namespace else {})}}}).llm

    requests = [ChatRequest.of([{"role": "user", "content": f"q{i}"}], "p@1") for i in range(4)]
    first = ScriptedBackend(lambda job, i: "from A")
    LLMClient(params("http://gpu-a:8000/v1", "qwen-7b-awq"), backends={"openai": lambda c: first}).chat("judge", requests)
    second = ScriptedBackend(lambda job, i: "from B")
    shared = LLMClient(params("http://gpu-b:8000/v1", "qwen-7b-awq"), backends={"openai": lambda c: second})
    assert [r.text for r in shared.chat("judge", requests)] == ["from A"] * 4 and second.jobs == []
    # without the namespace the other URL is its own endpoint
    alone = LLMClient(params("http://gpu-b:8000/v1", None), backends={"openai": lambda c: second})
    assert [r.text for r in alone.chat("judge", requests)] == ["from B"] * 4


def test_local_model_file_enters_the_key(tmp_path):
    """Two GGUF files behind the same role config: the second file is not served the first one's replies."""
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + b"\x01" * 3_000_000)
    cfg = parse_params({"llm": {"cache_path": str(tmp_path / "c.sqlite"),
                                "roles": {"default": {"model": str(gguf)}}}}).llm
    requests = [ChatRequest.of([{"role": "user", "content": "q"}], "p@1")]
    backend = ScriptedBackend(lambda job, i: "old weights")
    LLMClient(cfg, backends={"llamacpp": lambda c: backend}).chat("judge", requests)
    again = LLMClient(cfg, backends={"llamacpp": lambda c: backend}).chat("judge", requests)
    assert again[0].cached and len(backend.jobs) == 1  # same file: a hit
    gguf.write_bytes(b"GGUF" + b"\x02" * 3_000_000)  # same size, other weights (a re-quantized file)
    newer = ScriptedBackend(lambda job, i: "new weights")
    [res] = LLMClient(cfg, backends={"llamacpp": lambda c: newer}).chat("judge", requests)
    assert res.text == "new weights" and not res.cached


def test_journal_mode_is_wal_and_errors_are_not_stored(tmp_path):
    cache = LLMCache(tmp_path / "deep" / "er" / "c.sqlite")
    cache.put_many([("k1", "m", "t1", 3, 4)])
    cache.put_many([])
    with sqlite3.connect(tmp_path / "deep" / "er" / "c.sqlite") as con:
        assert con.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal"
    assert cache.get_many(["k1", "k2"]) == {"k1": ("t1", 3, 4, False)}
    assert cache.stats() == {"entries": 1, "tokens_in": 3, "tokens_out": 4}
    assert cache.by_model() == [("m", 1, 3, 4)]


def test_failed_put_many_rolls_back_the_whole_batch(tmp_path):
    cache = LLMCache(tmp_path / "c.sqlite")
    with pytest.raises(sqlite3.IntegrityError):
        cache.put_many([("ok", "m", "t", 1, 1), ("bad", "m", None, 1, 1)])  # text NOT NULL
    assert cache.get_many(["ok", "bad"]) == {}
    cache.put_many([("ok", "m", "t", 1, 1)])  # connection still usable afterwards
    assert cache.get_many(["ok"]) == {"ok": ("t", 1, 1, False)}


def test_truncation_flag_is_cached_and_old_caches_are_migrated(tmp_path):
    import sqlite3

    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as con:  # the table as written before replies carried their finish reason
        con.execute("CREATE TABLE responses (key TEXT PRIMARY KEY, model TEXT NOT NULL, text TEXT NOT NULL, "
                    "tokens_in INTEGER NOT NULL, tokens_out INTEGER NOT NULL, created REAL NOT NULL)")
        con.execute("INSERT INTO responses VALUES ('k0', 'm', 'old', 1, 2, 0)")
    cache = LLMCache(path)
    cache.put_many([("k1", "m", "cut", 1, 48, True), ("k2", "m", "whole", 1, 5, False)])
    got = cache.get_many(["k0", "k1", "k2"])
    assert got == {"k0": ("old", 1, 2, False), "k1": ("cut", 1, 48, True), "k2": ("whole", 1, 5, False)}


def test_rows_of_an_older_cache_are_kept_marked_and_never_served(tmp_path):
    """A cache written before the endpoint entered the key: its rows get key_version 1, new rows 2."""
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE responses (key TEXT PRIMARY KEY, model TEXT NOT NULL, text TEXT NOT NULL, "
                    "tokens_in INTEGER NOT NULL, tokens_out INTEGER NOT NULL, created REAL NOT NULL)")
        con.execute("INSERT INTO responses VALUES ('old-key', 'm', 'old reply', 1, 1, 0)")
    cfg = parse_params({"llm": {"cache_path": str(path), "roles": {"default": {"model": "m"}}}}).llm
    backend = ScriptedBackend(lambda job, i: "new reply")
    [res] = LLMClient(cfg, backends={"llamacpp": lambda c: backend}).chat("judge", [ChatRequest.of(
        [{"role": "user", "content": "q"}], "p@1")])
    assert res.text == "new reply" and not res.cached
    with sqlite3.connect(path) as con:
        rows = dict(con.execute("SELECT text, key_version FROM responses").fetchall())
    assert rows == {"old reply": 1, "new reply": 2}
