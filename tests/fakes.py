"""Scripted LLM backends for unit tests of code above the LLM layer (never used by the demo)."""

from __future__ import annotations

import json
from collections.abc import Callable

from dagster_project.lib.resources import LLMResource
from dagster_project.llm.backends import BACKENDS
from dagster_project.llm.backends.base import Job, JobOutput

Responder = Callable[[Job, int], str]


class ScriptedBackend:
    """Answers each sample with responder(job, sample_index); records every job it was sent."""

    chunk_size = 4

    def __init__(self, responder: Responder, fail: Callable[[Job], str | None] | None = None):
        self.responder, self.fail, self.jobs = responder, fail, []

    def generate(self, jobs: list[Job]) -> list[JobOutput]:
        outs = []
        for job in jobs:
            self.jobs.append(job)
            err = self.fail(job) if self.fail else None
            if err:
                outs.append(JobOutput(error=err))
                continue
            texts = [self.responder(job, i) for i in job.sample_indices]
            outs.append(JobOutput(texts=texts, tokens_in=10 * len(texts), tokens_out=5 * len(texts)))
        return outs


def schema_responder(job: Job, idx: int) -> str:
    """A plausible reply for every prompt the benchmark/evaluation groups send, keyed by schema/prompt."""
    props = (job.json_schema or {}).get("properties", {})
    last = job.messages[-1]["content"]
    if "query" in props:
        return json.dumps({"query": f"ambiguous request {abs(hash(last)) % 10_000}-{idx} about things?",
                           "clarifying_question": "Which one do you mean?", "missing_info": ["which"],
                           "explanation": "it has two readings"})
    if "score" in props:
        return json.dumps({"score": 4, "reason": "fine"})
    if "fits" in props:
        return json.dumps({"fits": True})
    if "reply_1" in props:
        return json.dumps({"reply_1": "maybe something", "follow_up_question": "Could you be more specific?",
                           "reply_2": "The blue one, on Monday."})
    if "reply" in props:
        return json.dumps({"reply": "The blue one, on Monday."})
    # subject model: clarify on the first user message, answer afterwards
    users = sum(1 for m in job.messages if m["role"] == "user")
    return "The clarifying question is: which one?" if users == 1 else "The answer is: here it is."


def scripted_llm(params, backend) -> LLMResource:
    """The project's LLMResource (cache, sessions, usage) with every backend replaced by a scripted one."""
    return LLMResource(params.llm, backends={name: (lambda cfg: backend) for name in BACKENDS})
