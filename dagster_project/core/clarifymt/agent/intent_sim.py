"""Intent-Sim: ask when simulated user intents disagree.

`intent_sim` is the original method (Zhang & Choi, "Clarify When Necessary", NAACL 2025): the model
writes one clarifying question (greedy), then plays the user and answers it k times (T=0.7); the simulated
intents are grouped (same intent: cosine similarity of their MiniLM embeddings >= tau, standing in for the
paper's bidirectional entailment) and the entropy over the groups is the uncertainty; above
`intent_entropy_threshold` it asks that question, otherwise one more greedy call answers. ClarifyMT-Bench
§6 settings: k=5, T=0.7, tau=0.5.

`intent_sim_interpretations` is this project's earlier re-specification: k sampled interpretations of the
request; mean pairwise cosine similarity below tau -> clarify (with the first sample's clarifying question),
otherwise answer stating the medoid interpretation; fewer than two usable interpretations -> `invalid`.

Replies are JSON with evaluation.structured_output, else free text (labelled lines and the prefix protocol);
protocol_ok is the share of a turn's replies that followed the format. The reply the user sees (the question, or
the final answer) decides in the run's channel: when it breaks the format the turn is `invalid` (parse_error).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from typing import Annotated, Any

import numpy as np

from dagster_project.config import EvaluationConfig
from dagster_project.core.clarifymt.agent.base import base_messages
from dagster_project.core.clarifymt.agent.method import (
    DialogueTurn,
    Prediction,
    SubjectMethod,
    ask,
    decision_of,
    json_string,
    transcript,
)
from dagster_project.core.shared.dedup import Embed
from dagster_project.llm.protocol import parse_decision
from dagster_project.llm.task import Answer, Chat, LLMTask, NonEmpty, Outcome, Reply, Status

METHOD = "intent_sim"
INTERPRETATIONS_METHOD = "intent_sim_interpretations"


class Interpretation(Reply):
    """One sampled reading of the request and the question that would settle it."""

    interpretation: Annotated[NonEmpty, json_string(minLength=3, maxLength=200)]
    clarifying_question: Annotated[NonEmpty, json_string(minLength=3, maxLength=200)]


INTENT_SIM = LLMTask("evaluate_intent_sim", fmt="json", role="subject", reply=Interpretation)
INTENT_SIM_TEXT = LLMTask("evaluate_intent_sim", fmt="text", role="subject", accept_truncated=True)
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


class IntentSimInterpretations(SubjectMethod):
    """k sampled interpretations per turn; low mean similarity asks, high similarity answers with the medoid."""

    name = INTERPRETATIONS_METHOD

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


# --------------------------------------------------------------------------- the original Intent-Sim

class QuestionReply(Reply):
    """The clarifying question Intent-Sim would ask (JSON form)."""

    question: Annotated[NonEmpty, json_string(minLength=3, maxLength=200)]


class UserReply(Reply):
    """One simulated user answer to that question (JSON form)."""

    reply: Annotated[NonEmpty, json_string(minLength=1, maxLength=200)]


class AnswerReply(Reply):
    """The answer when the simulated intents agree (JSON form)."""

    text: Annotated[NonEmpty, json_string(minLength=1, maxLength=400)]


GREEDY = {"temperature": 0.0}
# free text as in the paper's protocol: a reply cut off at max_tokens still counts (llm/task.py)
QUESTION = {False: LLMTask("evaluate_intent_sim_question", fmt="text", role="subject", sampling=GREEDY,
                           accept_truncated=True),
            True: LLMTask("evaluate_intent_sim_question", fmt="json", role="subject", reply=QuestionReply,
                          sampling=GREEDY)}
USER = {False: LLMTask("evaluate_intent_sim_user", fmt="text", role="subject", accept_truncated=True),
        True: LLMTask("evaluate_intent_sim_user", fmt="json", role="subject", reply=UserReply)}
ANSWER = {False: LLMTask("evaluate_intent_sim_answer", fmt="text", role="subject", sampling=GREEDY,
                         accept_truncated=True),
          True: LLMTask("evaluate_intent_sim_answer", fmt="json", role="subject", reply=AnswerReply, sampling=GREEDY)}


def _charged(preds: list[Prediction], answers: Sequence[Answer]) -> Iterator[tuple[Prediction, Answer]]:
    """Each answer's row charged with the call's usage; a failed call fails its row (llm_error) and is skipped."""
    for a in answers:
        p = preds[a.item]
        p.charge(a.result)
        if a.result.error:
            p.fail_llm(a.result.error)
            continue
        yield p, a


def intent_groups(vectors: np.ndarray, tau: float) -> list[list[int]]:
    """Connected components of the graph that links two intents with cosine similarity >= tau."""
    v = np.asarray(vectors, dtype=np.float64)
    v = v / np.clip(np.linalg.norm(v, axis=1, keepdims=True), 1e-12, None)
    same = (v @ v.T) >= tau
    seen: set[int] = set()
    groups = []
    for start in range(len(v)):
        if start in seen:
            continue
        stack, group = [start], []
        seen.add(start)
        while stack:
            i = stack.pop()
            group.append(i)
            for j in np.flatnonzero(same[i]):
                if int(j) not in seen:
                    seen.add(int(j))
                    stack.append(int(j))
        groups.append(sorted(group))
    return groups


def intent_entropy(groups: Sequence[Sequence[int]]) -> float:
    """Entropy (nats) of the share of simulated intents in each group; 0 when all agree."""
    n = sum(len(g) for g in groups)
    return float(-sum(len(g) / n * math.log(len(g) / n) for g in groups if g)) if n else 0.0


def _question_of(outcome: Any) -> str | None:
    """The question of step 1: the JSON field, or the text after "The clarifying question is"."""
    if not outcome.ok:
        return None
    if isinstance(outcome.value, QuestionReply):
        return outcome.value.question.strip()
    d = decision_of(outcome)
    return d.text if d.action == "clarify" and d.text else None


def _user_values(turn: DialogueTurn, question: str) -> dict[str, str]:
    """The simulated user's prompt values: the dialogue so far and the question it answers."""
    return {"dialogue": transcript(turn.history), "question": question}


class IntentSim(SubjectMethod):
    """The original Intent-Sim: a greedy question, k simulated user answers, entropy over intent groups."""

    name = METHOD

    def __init__(self, cfg: EvaluationConfig, role: str = "subject"):
        super().__init__(cfg, role)
        self.calls_per_turn = cfg.intent_k + 2

    def predict(self, turns: Sequence[DialogueTurn], chat: Chat, embed: Embed | None = None) -> list[Prediction]:
        if embed is None:
            raise ValueError("intent_sim needs a sentence encoder (embed)")
        c, js = self.cfg, self.cfg.structured_output
        preds = [Prediction() for _ in turns]
        replies = [[0, 0] for _ in turns]  # (followed the format, replies) per turn
        first = ask(chat, self.role, [(i, QUESTION[js], base_messages(t.history, QUESTION[js]))
                                      for i, t in enumerate(turns)], max_tokens=c.subject_max_tokens)
        questions: dict[int, str] = {}
        for a in first:
            preds[a.item].prompt_version, preds[a.item].raw_output = a.first.prompt_version, a.result.text
        for p, a in _charged(preds, first):
            q = _question_of(a.first)
            replies[a.item][1] += 1
            if q is None:
                p.status, p.error = Status.PARSE_ERROR.value, "no clarifying question to simulate answers to"
                p.protocol_ok = 0.0
                continue
            replies[a.item][0] += 1
            questions[a.item] = q
        sims = ask(chat, self.role, [(i, USER[js], _user_values(turns[i], q)) for i, q in questions.items()],
                   temperature=c.intent_temperature, max_tokens=c.agent_max_tokens, seed=c.sample_seed, n=c.intent_k)
        to_answer = self._decide(sims, preds, questions, replies, embed)
        last = ask(chat, self.role, [(i, ANSWER[js], base_messages(turns[i].history, ANSWER[js])) for i in to_answer],
                   max_tokens=c.subject_max_tokens)
        for p, a in _charged(preds, last):
            text = a.first.value.text if isinstance(a.first.value, AnswerReply) else None
            if not js and a.first.ok:
                d = decision_of(a.first)
                text = d.text if d.action == "answer" else None
            replies[a.item][1] += 1
            replies[a.item][0] += text is not None
            p.response = (text or a.result.text or "").strip() or None
            p.trace["answer_raw"] = a.result.text
            if text is None:  # the final reply breaks the decision channel: invalid, as a baseline's broken reply
                p.action, p.status = "invalid", Status.PARSE_ERROR.value
                p.error = a.first.error or "the answer reply does not follow the reply format"
        for p, (good, n) in zip(preds, replies):
            if p.status == Status.OK and n:
                p.protocol_ok = good / n
        return preds

    def _decide(self, sims: list[Any], preds: list[Prediction], questions: dict[int, str],
                replies: list[list[int]], embed: Embed) -> list[int]:
        """Group each turn's simulated intents, set clarify / answer; returns the turns that still need an answer."""
        c = self.cfg
        intents: dict[int, list[str]] = {}
        for p, a in _charged(preds, sims):
            texts = [(o.value.reply if isinstance(o.value, UserReply) else o.value or "").strip() if o.ok else ""
                     for o in a.outcomes]
            good = [t for t in texts if t]
            replies[a.item][0] += len(good)
            replies[a.item][1] += len(texts)
            if not good:
                p.status, p.error = Status.PARSE_ERROR.value, "no usable simulated user answer"
                continue
            intents[a.item] = good
        flat = [f"{questions[i]} {r}" for i, rs in intents.items() for r in rs]
        vectors = embed(flat) if flat else np.zeros((0, 1))
        start, to_answer = 0, []
        for i, rs in intents.items():
            groups = intent_groups(vectors[start:start + len(rs)], c.intent_tau)
            start += len(rs)
            h = intent_entropy(groups)
            p = preds[i]
            p.action = "clarify" if h > c.intent_entropy_threshold else "answer"
            p.trace = {"question": questions[i], "simulated_intents": rs, "groups": groups,
                       "entropy": round(h, 4), "tau": c.intent_tau, "threshold": c.intent_entropy_threshold}
            if p.action == "clarify":
                p.response = questions[i]
            else:
                to_answer.append(i)
        return to_answer
