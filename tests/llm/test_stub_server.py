"""benchmarks/latency_server.py (the instant OpenAI-compatible stub of the paper-scale benchmark) answers every
schema the project sends with JSON that the schema AND the step's reply model accept, answers free-text requests
in the evaluation protocol, gives n distinct choices, and is deterministic from the request."""

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import jsonschema
import pytest
from test_project_tasks import TASKS

from dagster_project.config import LLMConfig, RoleConfig
from dagster_project.core.clarilm.annotations import cotap_reply
from dagster_project.core.clarilm.facets import facet_list
from dagster_project.core.intents.ambiguous import edit_reply, verify_reply
from dagster_project.core.intents.assistant import assistant_schema
from dagster_project.core.retrieval.reranking import next_id_schema
from dagster_project.llm.chat import ChatRequest
from dagster_project.llm.client import LLMClient
from dagster_project.llm.protocol import parse_decision
from dagster_project.llm.task import reply_schema

SERVER = Path(__file__).resolve().parents[2] / "benchmarks" / "latency_server.py"
INTENTS = ("cancel_order", "track_order", "account_access")
# reply models built at run time (enums of this run's names, list sizes)
RUNTIME = {"intents.assistant": assistant_schema(INTENTS), "intents.edit": reply_schema(edit_reply(INTENTS)),
           "intents.verify": reply_schema(verify_reply(INTENTS)), "retrieval.rerank": next_id_schema(["d3", "d7"]),
           "clarilm.facets": reply_schema(facet_list(4)), "clarilm.cotap": reply_schema(cotap_reply(3))}
MODELS = {"clarilm.facets": facet_list(4), "clarilm.cotap": cotap_reply(3), "intents.edit": edit_reply(INTENTS),
          "intents.verify": verify_reply(INTENTS)}


@pytest.fixture(scope="module")
def stub():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(SERVER), str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(url + "/health", timeout=2).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"stub server did not start: {proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(timeout=20)


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def texts(reply: dict) -> list[str]:
    return [c["message"]["content"] for c in reply["choices"]]


def schema_body(schema: dict, prompt: str, n: int = 1, fmt: str = "json_schema") -> dict:
    rf = ({"type": "json_schema", "json_schema": {"name": "reply", "schema": schema}} if fmt == "json_schema"
          else {"type": "json_object", "schema": schema})
    return {"model": "stub", "messages": [{"role": "user", "content": prompt}], "n": n, "response_format": rf}


@pytest.mark.parametrize("name", sorted(k for k, t in TASKS.items() if t.reply is not None))
def test_project_schemas_get_valid_replies(stub, name):
    task = TASKS[name]
    for fmt in ("json_schema", "json_object"):
        for value in map(json.loads, texts(post(stub, schema_body(task.schema, f"{name} {fmt}", n=4, fmt=fmt)))):
            jsonschema.validate(value, task.schema)
            task.reply.model_validate(value)


@pytest.mark.parametrize("name", sorted(RUNTIME))
def test_runtime_schemas_get_valid_replies(stub, name):
    for i in range(5):
        [value] = map(json.loads, texts(post(stub, schema_body(RUNTIME[name], f"{name} {i}"))))
        jsonschema.validate(value, RUNTIME[name])
        if name in MODELS:
            MODELS[name].model_validate(value)


def test_a_clarify_decision_comes_with_a_question(stub):
    schema = next(t.schema for t in TASKS.values() if t.reply is not None and t.reply.__name__ == "DecisionReply")
    values = [json.loads(t) for t in texts(post(stub, schema_body(schema, "ask or answer", n=40)))]
    assert {v["action"] for v in values} == {"clarify", "answer"}
    assert all(v["text"].endswith("?") for v in values if v["action"] == "clarify")


def test_free_text_follows_the_protocol_with_n_distinct_choices(stub):
    body = {"model": "stub", "messages": [{"role": "user", "content": "Where is the bank?"}], "n": 30,
            "max_tokens": 48, "temperature": 0.7}
    reply = post(stub, body)
    got = texts(reply)
    assert len(got) == 30 and len(set(got)) == 30
    decisions = [parse_decision(t) for t in got]
    assert {d.action for d in decisions} == {"clarify", "answer"}
    assert all(t.endswith("?") for t, d in zip(got, decisions) if d.action == "clarify")
    assert reply["usage"]["completion_tokens"] > 0
    assert texts(post(stub, body)) == got  # deterministic from the request
    assert texts(post(stub, {**body, "messages": [{"role": "user", "content": "Where is the river?"}]})) != got


def test_project_client_on_the_openai_backend_parses_every_reply(stub, tmp_path):
    role = RoleConfig(backend="openai", model="stub", base_url=stub + "/v1", max_retries=0, timeout_s=30)
    client = LLMClient(LLMConfig(cache_path=str(tmp_path / "c.sqlite"), roles={"default": role}))
    tasks = [t for t in TASKS.values() if t.reply is not None]
    reqs = [ChatRequest.of([{"role": "user", "content": f"q{i}"}], "v", t.schema, n=2) for i, t in enumerate(tasks)]
    out = client.chat("judge", reqs)
    assert all(r.ok for r in out), [r.error for r in out if r.error]
    for task, r in zip(tasks, out):
        assert len(r.texts) == 2
        for text in r.texts:
            task.reply.model_validate(json.loads(text))
    with urllib.request.urlopen(stub + "/stats", timeout=5) as s:
        stats = json.loads(s.read())
    assert stats["requests"] >= len(reqs) and stats["handler_s"] > 0 and stats["process_cpu_s"] > 0


def test_openai_backend_retries_every_fault_kind_on_raw_replies(stub):
    """The backend reads the raw JSON body (no typed response models): truncated, non-JSON and empty replies,
    500s and 429s are still retried, and every job ends with the stub's own reply."""
    from faultproxy import FaultProxy

    from dagster_project.llm.backends.base import Job
    from dagster_project.llm.backends.openai import OpenAIBackend

    rates = {"500": 0.1, "429": 0.1, "truncated": 0.1, "nonjson": 0.1, "empty": 0.1}
    sampling = {"temperature": 0.7, "top_p": 1.0, "max_tokens": 48, "seed": 3}
    jobs = [Job(({"role": "user", "content": f"question {i}"},), sampling, [0, 1], None) for i in range(40)]
    with FaultProxy(stub, seed=5, rates=rates, retry_after_s=0) as proxy:
        backend = OpenAIBackend(RoleConfig(backend="openai", model="stub", base_url=proxy.url, max_retries=12,
                                           concurrency=4, timeout_s=30))
        backend.backoff_initial_s, backend.backoff_max_s = 0.01, 0.05
        outs = backend.generate(jobs)
        counts = proxy.counts
    assert all(counts[k] > 0 for k in rates), counts
    assert backend.retries == sum(counts[k] for k in rates)
    assert [o.error for o in outs] == [None] * 40
    for job, out in zip(jobs, outs):
        body = {"model": "stub", "messages": list(job.messages), "temperature": 0.7, "top_p": 1.0,
                "max_tokens": 48, "n": 2, "seed": 3}
        assert out.texts == texts(post(stub, body)) and out.truncated == [False, False]
        assert out.tokens_in > 0 and out.tokens_out > 0
