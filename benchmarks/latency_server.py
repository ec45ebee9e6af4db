"""A stub OpenAI-compatible chat server on 127.0.0.1 that answers every request after a fixed latency.

    python benchmarks/latency_server.py PORT LATENCY_MS

Used by bench_backends.bench_openai (P2): with the model out of the picture, the wall time of a batch shows
only how well the `openai` backend overlaps requests. Loopback only; stops when its parent kills it.
"""

import asyncio
import sys
import time

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

LATENCY_S = int(sys.argv[2]) / 1000 if len(sys.argv) > 2 else 0.1


async def completions(request: Request) -> JSONResponse:
    body = await request.json()
    await asyncio.sleep(LATENCY_S)
    n = body.get("n") or 1
    return JSONResponse({
        "id": "chatcmpl-stub", "object": "chat.completion", "created": int(time.time()), "model": body["model"],
        "choices": [{"index": i, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}
                    for i in range(n)],
        "usage": {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n}})


async def health(request: Request) -> JSONResponse:
    return JSONResponse({"ok": True})


app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"]), Route("/health", health)])

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False,
                backlog=2048)
