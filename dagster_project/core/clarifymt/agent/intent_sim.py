"""Intent-Sim: sample k interpretations of what the user wants; if they disagree, ask.

Paper setting: k=5 samples (T=0.7), MiniLM embeddings, mean pairwise cosine similarity below
tau=0.5 means the intent is unsettled -> clarify (with the first sample's clarifying question);
otherwise answer, stating the interpretation the samples agree on most (the medoid). Samples whose
reply is unusable are left out; with fewer than two usable interpretations the turn is `invalid`.
Each sample is JSON {interpretation, clarifying_question} with evaluation.structured_output, else free text:
a line "Interpretation: ..." and a line "The clarifying question is ...". protocol_ok = usable share.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated

import numpy as np

from dagster_project.config import EvaluationConfig
from dagster_project.core.clarifymt.agent.base import base_messages
from dagster_project.core.clarifymt.agent.method import (
    DialogueTurn,
    Prediction,
    SubjectMethod,
    ask,
    json_string,
)
from dagster_project.core.shared.dedup import Embed
from dagster_project.llm.protocol import parse_decision
from dagster_project.llm.task import Chat, LLMTask, NonEmpty, Outcome, Reply, Status

METHOD = "intent_sim"


class Interpretation(Reply):
    """One sampled reading of the request and the question that would settle it."""

    interpretation: Annotated[NonEmpty, json_string(minLength=3, maxLength=200)]
    clarifying_question: Annotated[NonEmpty, json_string(minLength=3, maxLength=200)]


INTENT_SIM = LLMTask("evaluate_intent_sim", role="subject", reply=Interpretation)
INTENT_SIM_TEXT = LLMTask("evaluate_intent_sim_text", role="subject")
_INTERPRETATION = re.compile(r"^[\W_]*interpretation\s*[:=-]\s*(.+)$", re.IGNORECASE | re.MULTILINE)


def interpretation_of(outcome: Outcome) -> Interpretation | None:
    """A sample's interpretation and question: the JSON reply, or the two labelled lines of a free-text one."""
    if not outcome.ok:
        return None
    if isinstance(outcome.value, Interpretation):
        return outcome.value
    text = outcome.value or ""
    m = _INTERPRETATION.search(text)
    questions = [d.text for d in map(parse_decision, text.splitlines()) if d.action == "clarify" and d.text]
    if not m or not m.group(1).strip() or not questions:
        return None
    return Interpretation.model_construct(interpretation=m.group(1).strip(), clarifying_question=questions[-1])


def mean_pairwise_similarity(vectors: np.ndarray) -> float:
    """Mean cosine similarity over all unordered pairs of rows (rows need not be normalised)."""
    v = np.asarray(vectors, dtype=np.float64)
    if len(v) < 2:
        raise ValueError("need at least two vectors")
    v = v / np.clip(np.linalg.norm(v, axis=1, keepdims=True), 1e-12, None)
    sims = v @ v.T
    iu = np.triu_indices(len(v), k=1)
    return float(sims[iu].mean())


def medoid(vectors: np.ndarray) -> int:
    """Index of the row with the highest total similarity to the others."""
    v = np.asarray(vectors, dtype=np.float64)
    v = v / np.clip(np.linalg.norm(v, axis=1, keepdims=True), 1e-12, None)
    return int((v @ v.T).sum(axis=1).argmax())


def intent_decision(similarity: float, tau: float) -> str:
    """Unsettled intent (similarity strictly below tau) -> clarify; otherwise answer."""
    return "clarify" if similarity < tau else "answer"


class IntentSim(SubjectMethod):
    """k sampled interpretations per turn; low mean similarity asks, high similarity answers with the medoid."""

    name = METHOD

    def __init__(self, cfg: EvaluationConfig, role: str = "subject"):
        super().__init__(cfg, role)
        self.calls_per_turn = cfg.intent_k

    def predict(self, turns: Sequence[DialogueTurn], chat: Chat, embed: Embed | None = None) -> list[Prediction]:
        if embed is None:
            raise ValueError("intent_sim needs a sentence encoder (embed)")
        c = self.cfg
        task = INTENT_SIM if c.structured_output else INTENT_SIM_TEXT
        answers = ask(chat, self.role, [(t, task, base_messages(t.history, task)) for t in turns],
                      temperature=c.intent_temperature, max_tokens=c.agent_max_tokens, seed=c.sample_seed,
                      n=c.intent_k)
        preds: list[Prediction] = []
        samples: list[list[Interpretation]] = []
        for a in answers:
            p = Prediction(prompt_version=a.first.prompt_version, raw_output="\n".join(a.result.texts))
            p.charge(a.result)
            good = [v for v in map(interpretation_of, a.outcomes) if v is not None]
            p.protocol_ok = len(good) / len(a.outcomes) if a.outcomes else None
            if a.result.error:
                p.protocol_ok = None
                p.fail_llm(a.result.error)
            elif len(good) < 2:
                p.status = Status.PARSE_ERROR.value
                p.error = f"{len(good)} of {len(a.result.texts)} samples usable (need 2)"
            preds.append(p)
            samples.append(good)
        # one encoder call for every usable interpretation of every turn
        flat = [g.interpretation.strip() for p, ss in zip(preds, samples) if p.status == Status.OK for g in ss]
        vectors = embed(flat) if flat else np.zeros((0, 1))
        start = 0
        for p, ss in zip(preds, samples):
            texts = [g.interpretation.strip() for g in ss]
            if p.status != Status.OK:
                p.trace = {"interpretations": texts}
                continue
            v = vectors[start:start + len(ss)]
            start += len(ss)
            sim = mean_pairwise_similarity(v)
            p.action = intent_decision(sim, c.intent_tau)
            if p.action == "clarify":
                p.response = ss[0].clarifying_question.strip()
            else:
                p.response = f"Assuming you mean: {texts[medoid(v)]}"
            p.trace = {"interpretations": texts, "similarity": round(sim, 4), "tau": c.intent_tau,
                       "usable_samples": len(ss)}
        return preds
