"""Intent-Sim: sample k interpretations of what the user wants; if they disagree, ask.

Paper setting: k=5 samples (T=0.7), MiniLM embeddings, mean pairwise cosine similarity below
tau=0.5 means the intent is unsettled -> clarify (with the first sample's clarifying question);
otherwise answer, stating the interpretation the samples agree on most (the medoid). Samples whose
JSON is unusable are left out; with fewer than two usable interpretations the turn is `invalid`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dagster_project.core.clarifymt.agent.base import base_messages
from dagster_project.core.clarifymt.agent.method import ChatFn, DialogueTurn, EmbedFn, MethodSettings, Prediction
from dagster_project.llm.chat import ChatRequest
from dagster_project.llm.parsing import parse_json_object, require_fields
from dagster_project.llm.prompts import load_prompt

METHOD = "intent_sim"
PROMPT = "evaluate_intent_sim"
SCHEMA = {
    "type": "object",
    "properties": {
        "interpretation": {"type": "string", "minLength": 3, "maxLength": 200},
        "clarifying_question": {"type": "string", "minLength": 3, "maxLength": 200},
    },
    "required": ["interpretation", "clarifying_question"],
}


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


class IntentSim:
    name = METHOD

    def __init__(self, settings: MethodSettings):
        self.settings = settings
        self.calls_per_turn = settings.intent_k

    def predict(self, turns: Sequence[DialogueTurn], chat: ChatFn, embed: EmbedFn | None = None) -> list[Prediction]:
        if embed is None:
            raise ValueError("intent_sim needs a sentence encoder (embed)")
        s = self.settings
        version = load_prompt(PROMPT).version
        reqs = [ChatRequest.of(base_messages(list(t.history), PROMPT), version, SCHEMA,
                               temperature=s.intent_temperature, max_tokens=s.agent_max_tokens, seed=s.seed,
                               n=s.intent_k) for t in turns]
        results = chat(reqs) if reqs else []
        preds: list[Prediction] = []
        samples: list[list[dict]] = []
        for res in results:
            p = Prediction(prompt_version=version, raw_output="\n".join(res.texts))
            p.charge(res)
            good = []
            if res.error:
                p.fail_llm(res.error)
            else:
                for text in res.texts:
                    obj, err = parse_json_object(text)
                    if not err and not require_fields(obj, {"interpretation": str, "clarifying_question": str}):
                        good.append({"interpretation": obj["interpretation"].strip(),
                                     "clarifying_question": obj["clarifying_question"].strip()})
                if len(good) < 2:
                    p.status, p.error = "parse_error", f"{len(good)} of {len(res.texts)} samples usable (need 2)"
            preds.append(p)
            samples.append(good)
        # one encoder call for every usable interpretation of every turn
        flat = [g["interpretation"] for p, ss in zip(preds, samples) if p.status == "ok" for g in ss]
        vectors = embed(flat) if flat else np.zeros((0, 1))
        start = 0
        for p, ss in zip(preds, samples):
            if p.status != "ok":
                p.trace = {"interpretations": [g["interpretation"] for g in ss]}
                continue
            v = vectors[start:start + len(ss)]
            start += len(ss)
            sim = mean_pairwise_similarity(v)
            p.action = intent_decision(sim, s.intent_tau)
            if p.action == "clarify":
                p.response = ss[0]["clarifying_question"]
            else:
                p.response = f"Assuming you mean: {ss[medoid(v)]['interpretation']}"
            p.trace = {"interpretations": [g["interpretation"] for g in ss], "similarity": round(sim, 4),
                       "tau": s.intent_tau, "usable_samples": len(ss)}
        return preds
