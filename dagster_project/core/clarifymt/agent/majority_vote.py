"""Majority Voting (self-consistency): k samples of the plain prompt at T=0.7, the majority action wins.

Paper setting: k=5, temperature 0.7. Samples that do not follow the response-prefix protocol abstain.
Ties (possible when samples abstain, or with an even k) go to **clarify**: a split vote is itself a sign
that the request is unsettled, and ClarifyMT-Bench finds models err toward answering too early.
With no valid sample at all the turn is `invalid` (status parse_error), as for the base prompt.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence

from dagster_project.core.clarifymt.agent.base import base_messages
from dagster_project.core.clarifymt.agent.method import ChatFn, DialogueTurn, EmbedFn, MethodSettings, Prediction
from dagster_project.llm.chat import ChatRequest
from dagster_project.llm.protocol import parse_decision
from dagster_project.llm.prompts import load_prompt

METHOD = "majority_vote"
TIE_BREAK = "clarify"


def majority_action(actions: Sequence[str]) -> tuple[str, dict[str, int]]:
    """(winning action, vote counts); invalid samples abstain; a tie goes to TIE_BREAK."""
    counts = Counter(a for a in actions if a in ("clarify", "answer"))
    votes = {"clarify": counts["clarify"], "answer": counts["answer"],
             "abstain": sum(1 for a in actions if a not in ("clarify", "answer"))}
    if not counts:
        return "invalid", votes
    if votes["clarify"] == votes["answer"]:
        return TIE_BREAK, votes
    return ("clarify" if votes["clarify"] > votes["answer"] else "answer"), votes


class MajorityVote:
    name = METHOD

    def __init__(self, settings: MethodSettings):
        self.settings = settings
        self.calls_per_turn = settings.vote_k

    def predict(self, turns: Sequence[DialogueTurn], chat: ChatFn, embed: EmbedFn | None = None) -> list[Prediction]:
        s = self.settings
        version = load_prompt("evaluate_base").version
        reqs = [ChatRequest.of(base_messages(list(t.history)), version, temperature=s.vote_temperature,
                               max_tokens=s.max_tokens, seed=s.seed, n=s.vote_k) for t in turns]
        results = chat(reqs) if reqs else []
        out = []
        for res in results:
            p = Prediction(prompt_version=version, raw_output=json.dumps(res.texts, ensure_ascii=False))
            p.charge(res)
            if res.error:
                p.fail_llm(res.error)
                out.append(p)
                continue
            decisions = [parse_decision(t) for t in res.texts]
            action, votes = majority_action([d.action for d in decisions])
            p.trace = {"votes": votes, "sample_actions": [d.action for d in decisions],
                       "tie": votes["clarify"] == votes["answer"] and action != "invalid"}
            if action == "invalid":
                p.status, p.error = "parse_error", f"none of the {len(decisions)} samples follows the protocol"
            else:
                p.action = action
                p.response = next(d.text for d in decisions if d.action == action) if any(
                    d.action == action for d in decisions) else None
            out.append(p)
        return out
