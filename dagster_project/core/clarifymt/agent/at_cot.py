"""AT-CoT (ambiguity-type chain of thought), adapted to multi-turn ask-or-answer.

The model first names the ambiguity type that remains after the whole dialogue (one of the 16
ClarifyMT-Bench subtypes, or "none"), then reasons briefly, then decides and writes the question or
the answer. The reply is constrained JSON, fields in that order, so the type is produced before the
decision as in the original method. Unparseable JSON -> `invalid` (parse_error).
"""

from __future__ import annotations

from collections.abc import Sequence
from string import Template

from dagster_project.core.clarifymt.agent.base import base_messages
from dagster_project.core.clarifymt.agent.method import ChatFn, DialogueTurn, EmbedFn, MethodSettings, Prediction
from dagster_project.llm.chat import ChatRequest
from dagster_project.llm.parsing import parse_json_object, require_fields
from dagster_project.llm.prompts import load_prompt
from dagster_project.core.shared.taxonomy import SUBTYPES

METHOD = "at_cot"
PROMPT = "evaluate_at_cot"
TYPES = [s.key for s in SUBTYPES] + ["none"]
SCHEMA = {
    "type": "object",
    "properties": {
        "ambiguity_type": {"type": "string", "enum": TYPES},
        "reasoning": {"type": "string", "maxLength": 240},
        "decision": {"type": "string", "enum": ["clarify", "answer"]},
        "response": {"type": "string", "minLength": 1, "maxLength": 240},
    },
    "required": ["ambiguity_type", "reasoning", "decision", "response"],
}


def taxonomy_lines() -> str:
    return "\n".join(f"- {s.key}: {s.definition}" for s in SUBTYPES)


def at_cot_messages(history: list) -> list:
    msgs = base_messages(history, PROMPT)
    system = Template(load_prompt(PROMPT).system).substitute(taxonomy=taxonomy_lines()).strip()
    return [{"role": "system", "content": system}, *msgs[1:]]


def parse_at_cot(text: str) -> tuple[Prediction, dict]:
    obj, err = parse_json_object(text)
    if not err:
        err = require_fields(obj, {"ambiguity_type": str, "decision": str, "response": str})
    if not err and obj["decision"] not in ("clarify", "answer"):
        err = f"decision {obj['decision']!r} is not clarify/answer"
    if err:
        return Prediction("invalid", None, "parse_error", err, text), {}
    trace = {"ambiguity_type": obj["ambiguity_type"], "reasoning": obj.get("reasoning")}
    return Prediction(obj["decision"], obj["response"].strip(), "ok", None, text), trace


class ATCoT:
    name = METHOD
    calls_per_turn = 1

    def __init__(self, settings: MethodSettings):
        self.settings = settings

    def predict(self, turns: Sequence[DialogueTurn], chat: ChatFn, embed: EmbedFn | None = None) -> list[Prediction]:
        version = load_prompt(PROMPT).version
        reqs = [ChatRequest.of(at_cot_messages(list(t.history)), version, SCHEMA, temperature=0.0,
                               max_tokens=self.settings.reasoning_max_tokens) for t in turns]
        results = chat(reqs) if reqs else []
        out = []
        for res in results:
            if res.error:
                p, trace = Prediction(raw_output=res.text or None), {}
                p.fail_llm(res.error)
            else:
                p, trace = parse_at_cot(res.text)
            p.trace, p.prompt_version = trace, version
            p.charge(res)
            out.append(p)
        return out
