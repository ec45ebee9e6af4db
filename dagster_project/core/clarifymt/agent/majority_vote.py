"""Majority Voting (self-consistency): k samples of the plain prompt at T=0.7, the majority action wins.

Paper setting: k=5, temperature 0.7. Samples that do not follow the reply format (prefix protocol, or
JSON with evaluation.structured_output) abstain; protocol_ok is the share of samples that followed it.
Ties (possible when samples abstain, or with an even k) go to **clarify**: a split vote is itself a sign
that the request is unsettled, and ClarifyMT-Bench finds models err toward answering too early.
With no valid sample at all the turn is `invalid` (status parse_error), as for the base prompt.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence

from dagster_project.config import EvaluationConfig
from dagster_project.core.clarifymt.agent.base import base_messages, base_task
from dagster_project.core.clarifymt.agent.method import (
    DialogueTurn,
    Prediction,
    SubjectMethod,
    ask,
    decision_of,
)
from dagster_project.core.shared.dedup import Embed
from dagster_project.llm.task import Chat, Status

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


class MajorityVote(SubjectMethod):
    """k sampled base-prompt replies per turn; the majority action and its first text win."""

    name = METHOD

    def __init__(self, cfg: EvaluationConfig, role: str = "subject"):
        super().__init__(cfg, role)
        self.calls_per_turn = cfg.vote_k

    def predict(self, turns: Sequence[DialogueTurn], chat: Chat, embed: Embed | None = None) -> list[Prediction]:
        c = self.cfg
        task = base_task(c.structured_output)
        answers = ask(chat, self.role, [(t, task, base_messages(t.history, task)) for t in turns],
                      temperature=c.vote_temperature, max_tokens=c.subject_max_tokens, seed=c.sample_seed,
                      n=c.vote_k)
        out = []
        for a in answers:
            p = Prediction(prompt_version=a.first.prompt_version,
                           raw_output=json.dumps(a.result.texts, ensure_ascii=False))
            p.charge(a.result)
            if a.result.error:
                p.fail_llm(a.result.error)
                out.append(p)
                continue
            decisions = [decision_of(o) for o in a.outcomes]
            action, votes = majority_action([d.action for d in decisions])
            p.protocol_ok = sum(d.action != "invalid" for d in decisions) / len(decisions)
            p.trace = {"votes": votes, "sample_actions": [d.action for d in decisions],
                       "tie": votes["clarify"] == votes["answer"] and action != "invalid"}
            if action == "invalid":
                p.status = Status.PARSE_ERROR.value
                p.error = f"none of the {len(decisions)} samples follows the protocol"
            else:
                p.action = action
                p.response = next((d.text for d in decisions if d.action == action), None)
            out.append(p)
        return out
