"""A fault-injecting HTTP proxy for tests: loopback only, bounded, seeded.

    proxy = FaultProxy("http://127.0.0.1:8000", seed=7, rates={"500": 0.05, "429": 0.05, ...}).start()
    ... point an OpenAI client at proxy.url (".../v1") ...
    proxy.stop(); proxy.counts  # what it did

Each request that reaches the proxy gets the next entry of a schedule drawn from random.Random(seed), in
arrival order, so a run's fault counts are reproducible (which prompt gets which fault depends on arrival
order under concurrency). Kinds:

- ok         forward to the upstream server, relay its reply
- 500        HTTP 500 with an OpenAI-style error body (upstream not called)
- 429        HTTP 429 with `Retry-After: <retry_after_s>` (upstream not called)
- slow       say nothing for `slow_s` seconds (longer than the client's timeout), then close
- truncated  forward, then send the status line and headers with the full Content-Length but only half the
             body, and close the connection
- nonjson    HTTP 200, Content-Type application/json, a body that is not JSON
- empty      HTTP 200, a well-formed chat completion with `"choices": []`

A prompt containing `poison` (if set) always gets a 500: the way a test makes failures that outlive
every retry. Bounds: binds 127.0.0.1 only, refuses a non-loopback upstream, answers 503 after
`max_requests`, and shuts itself down after `max_seconds`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import random
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from urllib.parse import urlsplit

KINDS = ("ok", "500", "429", "slow", "truncated", "nonjson", "empty")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class Event:
    t: float           # time.monotonic() when the request arrived
    prompt: str        # content of the last message ("" if the body was not a chat request)
    kind: str
    status: int | None  # status sent (None: slow / truncated)
    body: dict = field(default_factory=dict)  # the request's JSON body (model, n, seed, response_format...)


@dataclass
class FaultProxy:
    upstream: str                                   # e.g. http://127.0.0.1:8123 (no path)
    seed: int = 0
    rates: dict[str, float] = field(default_factory=dict)  # kind -> probability; the rest is "ok"
    retry_after_s: int = 2
    slow_s: float = 6.0
    poison: str | None = None
    max_requests: int = 5000
    max_seconds: float = 900.0
    events: list[Event] = field(default_factory=list)
    inflight: int = 0
    max_inflight: int = 0
    proxied_hosts: list[str] = field(default_factory=list)  # hosts named by absolute-form requests (HTTP_PROXY use)

    def __post_init__(self) -> None:
        u = urlsplit(self.upstream)
        if not _is_loopback(u.hostname or ""):
            raise ValueError(f"FaultProxy forwards to loopback addresses only, not {self.upstream!r}")
        self._up_host, self._up_port = u.hostname, u.port or 80
        bad = set(self.rates) - set(KINDS) - {"ok"}
        if bad or sum(self.rates.values()) > 1:
            raise ValueError(f"bad fault rates {self.rates}")
        self._rng = random.Random(self.seed)
        self._kinds = [k for k in KINDS if k != "ok"]
        self._weights = [self.rates.get(k, 0.0) for k in self._kinds]
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self.port = 0

    # ------------------------------------------------------------------ lifecycle
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FaultProxy:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, args=(sock,), daemon=True, name="faultproxy")
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fault proxy did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout=15)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def reset(self, seed: int | None = None) -> None:
        """Forget what happened so far; optionally restart the schedule from another seed."""
        self.events.clear()
        self.max_inflight = 0
        if seed is not None:
            self._rng = random.Random(seed)

    def _serve(self, sock: socket.socket) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            server = await asyncio.start_server(self._handle, sock=sock)
            self._ready.set()
            try:
                await asyncio.wait_for(self._stop.wait(), timeout=self.max_seconds)
            except asyncio.TimeoutError:
                pass
            server.close()
            await server.wait_closed()

        asyncio.run(main())

    # ------------------------------------------------------------------ what happened
    @property
    def counts(self) -> Counter:
        return Counter(e.kind for e in self.events)

    def requests_per_prompt(self) -> Counter:
        return Counter(e.prompt for e in self.events)

    # ------------------------------------------------------------------ HTTP
    def _next_kind(self, prompt: str) -> str:
        draw = self._rng.random()  # always draw, so the schedule does not depend on the poison prompts
        if self.poison and self.poison in prompt:
            return "500"
        acc = 0.0
        for kind, w in zip(self._kinds, self._weights):
            acc += w
            if draw < acc:
                return kind
        return "ok"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.inflight += 1  # one event loop thread: no lock needed
        self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            if path.startswith("http://"):  # sent to us as a forward proxy: serve it as if it named the upstream
                target = urlsplit(path)
                self.proxied_hosts.append(target.netloc)
                path = target.path + (f"?{target.query}" if target.query else "")
            headers = {k.strip().lower(): v.strip() for k, v in
                       (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
            body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
            try:
                req = json.loads(body or b"{}")
                msgs = req.get("messages") or [{}]
                prompt = str(msgs[-1].get("content", ""))
            except (ValueError, AttributeError):
                req, prompt = {}, ""
            if len(self.events) >= self.max_requests:
                kind = "refused"
            elif method == "POST" and path.endswith("/chat/completions"):
                kind = self._next_kind(prompt)
            else:
                kind = "ok"
            event = Event(time.monotonic(), prompt, kind, None, req if isinstance(req, dict) else {})
            self.events.append(event)
            await self._answer(kind, event, method, path, headers, body, writer)
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, asyncio.CancelledError, ConnectionError,
                ValueError):
            pass  # a client that hung up, a malformed request, or the proxy shutting down
        finally:
            self.inflight -= 1
            try:
                writer.close()
                await writer.wait_closed()
            except (ConnectionError, OSError):
                pass

    async def _answer(self, kind: str, event: Event, method: str, path: str, headers: dict[str, str],
                      body: bytes, writer: asyncio.StreamWriter) -> None:
        if kind == "refused":
            event.status = 503
            return await _send(writer, 503, _error("fault proxy: request budget spent"))
        if kind == "500":
            event.status = 500
            return await _send(writer, 500, _error("fault proxy: injected internal error"))
        if kind == "429":
            event.status = 429
            return await _send(writer, 429, _error("fault proxy: slow down"),
                               extra={"Retry-After": str(self.retry_after_s)})
        if kind == "slow":
            await asyncio.sleep(self.slow_s)  # past the client's timeout; then hang up without a reply
            return None
        if kind == "nonjson":
            event.status = 200
            return await _send(writer, 200, b"<html>502 Bad Gateway (not JSON)</html>")
        if kind == "empty":
            event.status = 200
            return await _send(writer, 200, json.dumps({
                "id": "chatcmpl-empty", "object": "chat.completion", "created": int(time.time()),
                "model": "fault-proxy", "choices": [],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}).encode())
        status, up_headers, up_body = await self._forward(method, path, headers, body)
        event.status = status
        if kind == "truncated":
            event.status = None
            return await _send(writer, status, up_body, extra=_passthrough(up_headers), cut=len(up_body) // 2)
        return await _send(writer, status, up_body, extra=_passthrough(up_headers))

    async def _forward(self, method: str, path: str, headers: dict[str, str],
                       body: bytes) -> tuple[int, dict[str, str], bytes]:
        reader, writer = await asyncio.open_connection(self._up_host, self._up_port)
        try:
            keep = {k: v for k, v in headers.items() if k not in ("host", "connection", "content-length",
                                                                  "accept-encoding")}
            head = [f"{method} {path} HTTP/1.1", f"Host: {self._up_host}:{self._up_port}", "Connection: close",
                    f"Content-Length: {len(body)}", *(f"{k}: {v}" for k, v in keep.items())]
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
            await writer.drain()
            raw = await asyncio.wait_for(reader.read(), timeout=600)
        finally:
            writer.close()
        head_b, _, rest = raw.partition(b"\r\n\r\n")
        lines = head_b.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        up_headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
        if up_headers.get("transfer-encoding", "").lower() == "chunked":
            rest = _dechunk(rest)
        return status, up_headers, rest


def _passthrough(headers: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k in ("content-type", "retry-after")}


def _error(message: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": "server_error", "param": None,
                                 "code": None}}).encode()


async def _send(writer: asyncio.StreamWriter, status: int, body: bytes, extra: dict[str, str] | None = None,
                cut: int | None = None) -> None:
    reasons = {200: "OK", 401: "Unauthorized", 429: "Too Many Requests", 500: "Internal Server Error",
               503: "Service Unavailable"}
    hdrs = {"content-type": "application/json", **{k.lower(): v for k, v in (extra or {}).items()}}
    head = [f"HTTP/1.1 {status} {reasons.get(status, 'Status')}", f"Content-Length: {len(body)}",
            "Connection: close", *(f"{k}: {v}" for k, v in hdrs.items())]
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (body if cut is None else body[:cut]))
    await writer.drain()


def _dechunk(data: bytes) -> bytes:
    out, pos = bytearray(), 0
    while True:
        end = data.find(b"\r\n", pos)
        if end < 0:
            break
        size = int(data[pos:end].split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out += data[end + 2:end + 2 + size]
        pos = end + 2 + size + 2
    return bytes(out)
