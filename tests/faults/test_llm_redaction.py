"""Secrets echoed by a server never reach the cache, a table or a log (llm/redact.py via the client)."""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import polars as pl
import pytest

from dagster_project.config import parse_params
from dagster_project.io.writers import write_parquet_atomic
from dagster_project.llm.chat import ChatRequest
from dagster_project.llm.client import LLMClient
from dagster_project.llm.redact import MASK, Redactor

SECRET = "sk-proj-ECHO-4b1d9e77c0aa51f3"
OTHER_ROLE_SECRET = "gw-token-77aa19be03"  # no known pattern: only masked because it is an api_key_env value


class EchoKeyServer(BaseHTTPRequestHandler):
    """An OpenAI-style endpoint on 127.0.0.1 that repeats the caller's key: in a 401 body, or in the reply."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        key = self.headers.get("Authorization", "").removeprefix("Bearer ")
        prompt = body["messages"][-1]["content"]
        if "deny" in prompt:
            status, payload = 401, {"error": {"message": f"Incorrect API key provided: {key}. "
                                              f"Header was 'Authorization: Bearer {key}'", "type": "invalid_request_error"}}
        else:
            text = f"Sure. Your key is {key}; the gateway token is {OTHER_ROLE_SECRET}; api_key={key}"
            status, payload = 200, {
                "id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}}
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), EchoKeyServer)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()


def test_a_key_echoed_by_the_server_is_in_no_file_of_the_output_tree(server, tmp_path, monkeypatch, caplog, capsys):
    monkeypatch.setenv("CLARIFY_ECHO_KEY", SECRET)
    monkeypatch.setenv("CLARIFY_GATEWAY_KEY", OTHER_ROLE_SECRET)
    out = tmp_path / "project"
    cfg = parse_params({"llm": {"cache_path": str(out / ".cache" / "llm.sqlite"), "roles": {
        "default": {"model": "m"},
        "judge": {"backend": "openai", "model": "echo", "base_url": server, "api_key_env": "CLARIFY_ECHO_KEY",
                  "max_retries": 0},
        "generator": {"backend": "openai", "model": "gw", "base_url": server, "api_key_env": "CLARIFY_GATEWAY_KEY"},
    }}}).llm
    log = logging.getLogger("clarify.test")
    out.mkdir(parents=True)
    handler = logging.FileHandler(out / "run.log")
    log.addHandler(handler)
    try:
        results = LLMClient(cfg).chat("judge", [ChatRequest.of([{"role": "user", "content": p}], "p@1")
                                                for p in ("please deny", "hello")], progress=log.warning)
    finally:
        log.removeHandler(handler)
        handler.close()
    denied, answered = results
    assert "AuthenticationError" in denied.error and MASK in denied.error  # the echo was there, and masked
    assert answered.ok and answered.text.count(MASK) == 3
    rows = pl.DataFrame({"error": [r.error for r in results], "raw_output": [r.text for r in results]})
    write_parquet_atomic(rows, out / "assets" / "evaluation" / "predictions" / "subject=echo" / "method=base.parquet")

    leaked = [str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()
              for s in (SECRET, OTHER_ROLE_SECRET) if s.encode() in p.read_bytes()]
    assert leaked == []
    assert (out / "run.log").stat().st_size > 0 and any((out / ".cache").iterdir())  # something was written
    captured = capsys.readouterr()
    assert SECRET not in caplog.text + captured.out + captured.err


@pytest.mark.parametrize("text", [
    "Incorrect API key provided: sk-abcdefghijklmnop1234",
    "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig",
    '{"api_key": "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"}',
    "x-api-key=0123456789abcdef",
])
def test_common_key_patterns_are_masked_without_any_env_variable(text):
    redacted = Redactor([])(text)
    assert MASK in redacted
    assert not any(len(tok) >= 12 and tok in redacted for tok in text.replace('"', " ").split()[-1:])


def test_ordinary_text_is_left_alone():
    text = "The task-oriented dialogue asks: which key do you mean, the piano key or the house key?"
    assert Redactor(["CLARIFY_UNSET_VAR"])(text) == text
