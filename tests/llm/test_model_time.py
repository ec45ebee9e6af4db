"""The model's own time per call (ChatResult.model_s, `llm/model_s` metadata): what `clarify timings` sets against
a stage's wall time. Backends that measure it report it; for the others the client counts a request's latency."""

from __future__ import annotations

from types import SimpleNamespace

from fakes import ScriptedBackend  # tests/fakes.py, on sys.path via tests/conftest.py

from dagster_project.config import parse_params
from dagster_project.llm.backends.base import JobOutput
from dagster_project.llm.backends.llamacpp import LlamaCppBackend
from dagster_project.llm.chat import ChatRequest
from dagster_project.llm.client import LLMClient, LLMSession


def _req(text: str, **kw) -> ChatRequest:
    return ChatRequest.of([{"role": "user", "content": text}], "p@1", **kw)


def _client(tmp_path, backend) -> LLMClient:
    llm = parse_params({"llm": {"cache_path": str(tmp_path / "c.sqlite"),
                                "roles": {"default": {"model": "m"}}}}).llm
    return LLMClient(llm, backends={"llamacpp": lambda cfg: backend})


class Measured(ScriptedBackend):
    """Reports 0.25 s of model time per job (as llama.cpp does: only the time inside the model call)."""

    def generate(self, jobs):
        outs = super().generate(jobs)
        for o in outs:
            o.model_s = 0.25
        return outs


class Queued:
    """generate_each backend whose jobs spent most of their latency waiting (as the openai backend's do)."""

    chunk_size = 8

    def generate_each(self, jobs, on_done):
        for i, job in enumerate(jobs):
            on_done(i, JobOutput(texts=["ok"] * len(job.sample_indices), latency_s=2.0, model_s=0.5))


def test_session_usage_carries_model_time_apart_from_latency_and_none_for_cache_hits(tmp_path):
    client = _client(tmp_path, Queued())
    session = LLMSession(client)
    session("judge", [_req("a"), _req("b")])
    usage = session.usage()
    assert usage["llm/model_s"] == 1.0 and usage["llm/judge/model_s"] == 1.0 and usage["llm/latency_s"] == 4.0
    again = LLMSession(client)
    again("judge", [_req("a"), _req("b")])
    assert again.usage()["llm/model_s"] == 0 and again.usage()["llm/cache_hits"] == 2


def test_chunked_backend_model_time_is_its_own_measure_else_the_chunk_share(tmp_path):
    measured = _client(tmp_path / "m", Measured(lambda job, i: "x")).chat("judge", [_req(f"q{i}") for i in range(5)])
    assert [r.model_s for r in measured] == [0.25] * 5
    plain = _client(tmp_path / "p", ScriptedBackend(lambda job, i: "x")).chat("judge", [_req(f"q{i}") for i in range(5)])
    assert all(r.model_s == r.latency_s for r in plain)


class FakeLlama:
    """create_chat_completion of the backend's PrefixReuseLlama: counts its calls and the states it keeps."""

    def __init__(self, fails: bool = False):
        self.calls = self.remembered = 0
        self.fails = fails

    def use_threads(self, n: int) -> None:
        pass

    def create_chat_completion(self, **kw):
        if self.fails:
            raise RuntimeError("llama_decode returned -1")
        self.calls += 1
        return {"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1}}

    def remember(self):
        self.remembered += 1


def _fake_backend(llm: FakeLlama) -> LlamaCppBackend:
    backend = LlamaCppBackend.__new__(LlamaCppBackend)  # no GGUF: the model object is the fake above
    backend.llms, backend.threads, backend.parallel = [llm], 2, 1
    return backend


def test_llamacpp_backend_measures_each_sample_inside_the_model_call():
    backend = _fake_backend(FakeLlama())
    job = SimpleNamespace(messages=({"role": "user", "content": "q"},), json_schema=None, sample_indices=[0, 1, 2],
                          sampling={"temperature": 0.7, "top_p": 1.0, "max_tokens": 8, "seed": 0})
    [out] = backend.generate([job])
    assert backend.llms[0].calls == backend.llms[0].remembered == 3 and out.texts == ["hi"] * 3
    assert out.model_s is not None and out.model_s >= 0 and out.latency_s >= out.model_s
    failed = _fake_backend(FakeLlama(fails=True))  # an error row, never an exception
    assert "llama_decode returned -1" in failed.generate([job])[0].error
