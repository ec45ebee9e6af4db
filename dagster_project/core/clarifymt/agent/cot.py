"""Zero-shot chain of thought: reason step by step, then a final line in the response-prefix protocol.

The reply is free text (as for the base prompt). Its decision is the **last** line that opens with
"The answer is" / "The clarifying question is" (case- and whitespace-tolerant, as parse_decision);
a reply without such a line (e.g. cut off by the token limit) is `invalid`, counted as wrong.
"""

from __future__ import annotations

from collections.abc import Sequence

from dagster_project.core.clarifymt.agent.base import base_messages
from dagster_project.core.clarifymt.agent.method import (
    ChatFn, DialogueTurn, EmbedFn, MethodSettings, Prediction, decision_prediction,
)
from dagster_project.llm.chat import ChatRequest
from dagster_project.llm.protocol import Decision, parse_decision
from dagster_project.llm.prompts import load_prompt

METHOD = "cot"
PROMPT = "evaluate_cot"


def final_decision(text: str | None) -> tuple[Decision, str]:
    """(decision of the last protocol line, reasoning before it); invalid when no line follows the protocol."""
    lines = (text or "").splitlines()
    for i in range(len(lines) - 1, -1, -1):
        d = parse_decision(lines[i])
        if d.action != "invalid":
            rest = " ".join(x.strip() for x in lines[i + 1:] if x.strip())
            full = Decision(d.action, " ".join(x for x in (d.text, rest) if x))
            return full, "\n".join(lines[:i]).strip()
    return Decision("invalid", (text or "").strip()), (text or "").strip()


class ChainOfThought:
    name = METHOD
    calls_per_turn = 1

    def __init__(self, settings: MethodSettings):
        self.settings = settings

    def predict(self, turns: Sequence[DialogueTurn], chat: ChatFn, embed: EmbedFn | None = None) -> list[Prediction]:
        version = load_prompt(PROMPT).version
        reqs = [ChatRequest.of(base_messages(list(t.history), PROMPT), version, temperature=0.0,
                               max_tokens=self.settings.reasoning_max_tokens) for t in turns]
        results = chat(reqs) if reqs else []
        out = []
        for res in results:
            if res.error:
                p = Prediction(raw_output=res.text or None)
                p.fail_llm(res.error)
            else:
                decision, reasoning = final_decision(res.text)
                p = decision_prediction(decision, res.text)
                if decision.action == "invalid":
                    p.error = "no final line starts with a protocol prefix"
                p.trace = {"reasoning": reasoning}
            p.prompt_version = version
            p.charge(res)
            out.append(p)
        return out
