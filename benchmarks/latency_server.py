"""A stub OpenAI-compatible chat server on 127.0.0.1 whose replies are valid for each request, after a fixed latency.

    python benchmarks/latency_server.py PORT [LATENCY_MS]      # LATENCY_MS default 0: answers at once

Every reply is deterministic from a hash of the request (messages, sampling, schema; choice index for n > 1):
- `response_format` json_schema (or json_object with a `schema`): a JSON object valid for that schema (enums,
  required properties, string lengths, number ranges, arrays, nested objects); a string field named like a
  question, or any string beside an enum that chose "clarify", is a question;
- otherwise the evaluation protocol's free text, "The answer is ..." or "The clarifying question is ...?", mixed.
GET /stats gives the requests served, the time spent building replies and the process's CPU time, so a benchmark can
tell the server's share of a round trip from the client's. Used by bench_backends.bench_openai (P2, with
latency) and bench_paper_scale (no latency). Loopback only; stops when its parent kills it.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import time
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

# plain nouns and adjectives: random picks are far apart for MiniLM, so generated queries survive dedup at 0.7
_VOCABULARY = """
anchor apricot archive atlas badger balcony bamboo banner barrel basil beacon beetle bicycle biscuit blanket
blossom bonfire bracelet bridge bucket cabin cactus camera canal candle canyon carpet castle cathedral cedar
cellar chapel cherry chimney cinnamon circus cliff clock cobalt comet compass copper coral cottage crater
cricket crystal cypress dagger desert diamond dolphin domino dragon drum eagle easel ember emerald engine
falcon feather ferry fiddle fjord flute forest fossil fountain fox galaxy garden garlic gazebo geyser ginger
glacier goblet granite guitar hammock harbor harvest hazel helmet hermit hive honey horizon iceberg igloo
island ivory jacket jaguar jasmine jelly jigsaw jungle kayak kettle kiwi ladder lagoon lantern lavender
ledger lemon library lighthouse lily lobster locket magnet mango maple marble meadow meteor mirror monsoon
mosaic mountain museum nectar needle nomad noodle oak oasis ocean olive opera orbit orchard otter owl paddle
palace panther parsley peacock pepper pebble pigeon pillow pine planet plum pocket pond poppy prairie quartz
quill quilt rabbit radar raisin raven reef ribbon river rocket saddle saffron sailor satchel scarf scroll
shadow sherbet shovel silver skate sparrow spindle spruce squirrel stadium starfish statue summit swamp
tablet tambourine teapot telescope temple thimble thunder tiger timber tortoise tower tractor trumpet tulip
tundra tunnel turbine umbrella unicorn valley vanilla velvet violin volcano waffle wagon walnut walrus
waterfall whistle willow window yacht yogurt zebra zeppelin zinnia
"""
WORDS = _VOCABULARY.split()
PROTOCOL = ("The answer is", "The clarifying question is")


def request_digest(body: dict[str, Any]) -> str:
    """sha256 of the request without `n` (choices are told apart by their index instead)."""
    payload = {k: v for k, v in body.items() if k not in ("n", "stream")}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def sentence(rng: random.Random, lo: int = 0, hi: int | None = None, question: bool = False) -> str:
    """Random whole words, lo to hi characters (hi default 90, most 24-90 long); a question ends with '?'."""
    hi = 90 if hi is None else hi
    room = hi - 1 if question and hi > lo else hi  # keep one character for the '?'
    target = min(room, max(lo, rng.randint(24, 90)))
    text = rng.choice(WORDS)[:room]
    while len(text) < target:
        word = rng.choice(WORDS)
        if len(text) + 1 + len(word) > room and len(text) >= lo:
            break
        text = f"{text} {word}"[:room]
    text = text.rstrip().capitalize().ljust(min(lo, room), "x")
    return text + "?" if room < hi else text


def fake_value(schema: dict[str, Any], rng: random.Random, question: bool = False) -> Any:
    """A value valid for the JSON schema; `question`: strings are phrased as questions."""
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return rng.choice(schema["enum"])
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            branches = [s for s in schema[key] if s.get("type") != "null"] or schema[key]
            return fake_value(rng.choice(branches), rng, question)
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = rng.choice([k for k in kind if k != "null"] or ["null"])
    if kind == "object":
        return fake_object(schema, rng)
    if kind == "array":
        return fake_array(schema, rng, question)
    if kind == "integer":
        lo = schema.get("minimum", schema.get("exclusiveMinimum", -1) + 1 if "exclusiveMinimum" in schema else 0)
        hi = schema.get("maximum", schema["exclusiveMaximum"] - 1 if "exclusiveMaximum" in schema else lo + 10)
        return rng.randint(int(lo), int(hi))
    if kind == "number":
        lo = schema.get("minimum", schema.get("exclusiveMinimum", 0.0))
        hi = schema.get("maximum", schema.get("exclusiveMaximum", lo + 1.0))
        return round(lo + (hi - lo) * (0.05 + 0.9 * rng.random()), 4)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    return sentence(rng, schema.get("minLength", 0), schema.get("maxLength"), question)


def fake_object(schema: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """Every property (required or not), enums first: an enum that chose 'clarify' makes the strings questions."""
    props: dict[str, Any] = schema.get("properties", {})
    if not props:  # a free-form object (additionalProperties only)
        return {"text": sentence(rng)}
    out = {k: fake_value(s, rng) for k, s in props.items() if "enum" in s or "const" in s}
    asks = "clarify" in out.values()
    for k, s in props.items():
        if k not in out:
            out[k] = fake_value(s, rng, question=asks or "question" in k)
    return {k: out[k] for k in props}


def fake_array(schema: dict[str, Any], rng: random.Random, question: bool) -> list[Any]:
    items = schema.get("items", {})
    lo = schema.get("minItems", 1)
    hi = max(lo, min(schema.get("maxItems", lo + 3), lo + 3))
    n = rng.randint(lo, hi)
    if schema.get("uniqueItems") and "enum" in items:
        return rng.sample(items["enum"], min(n, len(items["enum"])))
    return [fake_value(items, rng, question) for _ in range(n)]


def response_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON schema a request asks for (json_schema, or json_object with a schema; {} = any object)."""
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        return (fmt.get("json_schema") or {}).get("schema") or {}
    if fmt.get("type") == "json_object":
        return fmt.get("schema") or {}
    return None


def reply_text(body: dict[str, Any], digest: str, index: int) -> str:
    """Choice `index` of the reply to `body`: schema-valid JSON, or protocol text that fits max_tokens."""
    rng = random.Random(f"{digest}:{index}")
    schema = response_schema(body)
    if schema is not None:
        return json.dumps(fake_value(schema, rng) if schema else {"text": sentence(rng)})
    clarify = rng.random() < 0.5
    limit = max(8, min(90, 3 * int(body.get("max_tokens") or 64) - 32))
    return f"{PROTOCOL[clarify]} {sentence(rng, 0, limit, clarify).lower()}" + ("" if clarify else ".")


def completion(body: dict[str, Any]) -> dict[str, Any]:
    """The whole chat.completion reply to one request body."""
    digest = request_digest(body)
    texts = [reply_text(body, digest, i) for i in range(int(body.get("n") or 1))]
    prompt_tokens = sum(len(str(m.get("content") or "")) for m in body.get("messages", [])) // 4 + 1
    out_tokens = [len(t) // 4 + 1 for t in texts]
    return {"id": f"chatcmpl-{digest[:12]}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "stub"),
            "choices": [{"index": i, "finish_reason": "stop", "message": {"role": "assistant", "content": t}}
                        for i, t in enumerate(texts)],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": sum(out_tokens),
                      "total_tokens": prompt_tokens + sum(out_tokens)}}


STATS = {"requests": 0, "handler_s": 0.0}


def build_app(latency_s: float = 0.0) -> Starlette:
    async def completions(request: Request) -> JSONResponse:
        body = await request.json()
        t = time.perf_counter()
        reply = completion(body)
        STATS["handler_s"] += time.perf_counter() - t
        STATS["requests"] += 1
        if latency_s:
            await asyncio.sleep(latency_s)
        return JSONResponse(reply)

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    async def stats(request: Request) -> JSONResponse:
        return JSONResponse({**STATS, "process_cpu_s": time.process_time()})

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"]),
                             Route("/health", health), Route("/stats", stats)])


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("port", type=int)
    ap.add_argument("latency_ms", type=int, nargs="?", default=0, help="added to every reply (default 0)")
    args = ap.parse_args()
    uvicorn.run(build_app(args.latency_ms / 1000), host="127.0.0.1", port=args.port, log_level="warning",
                access_log=False, backlog=2048)
