"""A tiny OpenAI-compatible chat server on 127.0.0.1 for tests that run steps in other processes (they reach it
over HTTP). Replies follow the evaluation protocol: the first user turn is asked back, later turns answered.

    with running_stub() as stub: ... stub.url (".../v1"), stub.requests (bodies received) ...

A rendezvous (a set of model names) holds every reply until requests for all of those models have arrived: two
runs that ask for different models only both finish quickly if they run at the same time (`met` says they did).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


@dataclass
class Stub:
    url: str = ""
    delay_s: float = 0.0
    rendezvous: frozenset[str] = frozenset()
    wait_s: float = 120.0
    requests: list[dict] = field(default_factory=list)
    met: bool | None = None  # None: no rendezvous asked for; False: a reply gave up waiting
    _all_here: asyncio.Event | None = None

    def reply(self, body: dict) -> str:
        users = sum(1 for m in body["messages"] if m["role"] == "user")
        return "The clarifying question is: Which one do you mean?" if users == 1 else "The answer is: Here it is."

    async def completions(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.requests.append(body)
        if self.rendezvous:
            await self._meet()
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        n = body.get("n") or 1
        return JSONResponse({
            "id": "chatcmpl-stub", "object": "chat.completion", "created": int(time.time()), "model": body["model"],
            "choices": [{"index": i, "finish_reason": "stop", "message": {"role": "assistant",
                                                                          "content": self.reply(body)}}
                        for i in range(n)],
            "usage": {"prompt_tokens": 5, "completion_tokens": 4 * n, "total_tokens": 5 + 4 * n}})

    async def _meet(self) -> None:
        self._all_here = self._all_here or asyncio.Event()
        if self.rendezvous <= {r["model"] for r in self.requests}:
            self._all_here.set()
        try:
            await asyncio.wait_for(self._all_here.wait(), self.wait_s)
            self.met = self.met is not False
        except TimeoutError:
            self.met = False

    async def models(self, request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": "stub", "object": "model"}]})


@contextmanager
def running_stub(delay_s: float = 0.0, rendezvous: frozenset[str] = frozenset()) -> Iterator[Stub]:
    """A Stub served by uvicorn in a daemon thread on a free loopback port, stopped on exit."""
    stub = Stub(delay_s=delay_s, rendezvous=rendezvous)
    app = Starlette(routes=[Route("/v1/chat/completions", stub.completions, methods=["POST"]),
                            Route("/v1/models", stub.models)])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    srv = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("stub OpenAI server did not start")
        time.sleep(0.02)
    stub.url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    try:
        yield stub
    finally:
        srv.should_exit = True
        thread.join(timeout=10)
        sock.close()
