"""ClarifyAgent (ClarifyMT-Bench §6): Input -> Perceiver -> Forecaster -> Tracker -> Planner -> Output.

Per turn, at most five LLM calls to the subject model (each constrained JSON):

- **Input** normalises the dialogue into {request, latest}.
- **Perceiver** reports slots with status filled / unfilled / conflict (and values).
- **Forecaster** infers which of the six user personas the latest reply shows. On a turn where the
  user has not yet answered any question (turn 1) there is no behaviour to read, so it is not called.
- **Tracker** (tracker.py, no LLM) moves the slot FSM and evaluates the RSC condition.
- **Planner** decides ask or answer, and which slot to ask about.
- **Output** writes the question, or the answer stating the assumptions it still makes.

The tracker state is carried across the turns of one dialogue: turn 1 of every dialogue is processed
as one batch per module, then turn 2, and so on. Perceiver and Forecaster requests of a turn go out in
one batch (both read only the Input's summary).

Ablations remove one module and nothing else: without the Perceiver the Tracker receives no
observations (the Planner is told slot tracking is unavailable); without the Forecaster the Planner
gets no persona; without the Planner the decision comes from ``rule_plan`` (answer when RSC holds or
the user refuses to clarify, else ask about the first unresolved slot). The same rule stands in when a
Planner reply cannot be parsed (``decided_by = "rule_fallback"``). Every intermediate is kept per row.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dagster_project.core.clarifymt.agent.method import (
    ChatFn, DialogueTurn, EmbedFn, MethodSettings, Prediction, transcript,
)
from dagster_project.core.clarifymt.agent.tracker import Observation, Tracker, slot_key
from dagster_project.llm.chat import ChatRequest, ChatResult
from dagster_project.llm.parsing import parse_json_object, require_fields
from dagster_project.llm.prompts import load_prompt
from dagster_project.core.shared.taxonomy import PERSONAS

METHOD = "clarify_agent"
MODULES = ("input", "perceiver", "forecaster", "planner", "output")
MAX_ASKS_PER_SLOT = 2  # the Planner's rule stops asking about a slot the agent already asked twice
PERSONA_KEYS = [p.key for p in PERSONAS]
PERSONA_HINTS = {
    "precise": "This user gives clear details when asked: an answer is usually possible now.",
    "refusal": "This user declines to give more detail: asking again rarely helps; answer and state assumptions.",
    "partial_vague": "This user's replies stay vague: the missing detail is probably still missing.",
    "off_focus": "This user did not address the question: the missing detail is still missing.",
    "contradictory": "This user contradicts themselves: resolve the conflict before answering.",
    "factually_wrong": "This user stated something incorrect: check it with them before answering.",
}

_S = {"type": "string"}
INPUT_SCHEMA = {"type": "object", "properties": {"request": {**_S, "minLength": 3, "maxLength": 240},
                                                 "latest": {**_S, "maxLength": 200}},
                "required": ["request", "latest"]}
PERCEIVER_SCHEMA = {
    "type": "object",
    "properties": {"slots": {"type": "array", "maxItems": 4, "items": {
        "type": "object",
        "properties": {"name": {**_S, "minLength": 1, "maxLength": 40}, "value": {**_S, "maxLength": 80},
                       "status": {"type": "string", "enum": ["filled", "unfilled", "conflict"]},
                       "required": {"type": "boolean"}},
        "required": ["name", "value", "status", "required"]}}},
    "required": ["slots"],
}
FORECASTER_SCHEMA = {"type": "object", "properties": {"persona": {"type": "string", "enum": PERSONA_KEYS},
                                                      "reason": {**_S, "maxLength": 160}},
                     "required": ["persona", "reason"]}
PLANNER_SCHEMA = {"type": "object",
                  "properties": {"action": {"type": "string", "enum": ["clarify", "answer"]},
                                 "target_slot": {**_S, "maxLength": 40}, "reason": {**_S, "maxLength": 160}},
                  "required": ["action", "target_slot", "reason"]}
OUTPUT_SCHEMA = {"type": "object", "properties": {"text": {**_S, "minLength": 2, "maxLength": 300}},
                 "required": ["text"]}


@dataclass(frozen=True)
class Plan:
    action: str  # clarify | answer
    target_slot: str | None
    reason: str
    decided_by: str  # planner | rule | rule_fallback


def rule_plan(tracker: Tracker | None, persona: str | None) -> Plan:
    """The decision without an LLM Planner: answer if the user refuses or RSC holds, else ask."""
    if persona == "refusal":
        return Plan("answer", None, "the user declines to clarify", "rule")
    if tracker is None:
        return Plan("clarify", None, "no slot information; the request may still be ambiguous", "rule")
    if tracker.rsc:
        return Plan("answer", None, "all required slots are filled and nothing conflicts (RSC)", "rule")
    open_slots = [s for s in tracker.unresolved() if tracker.slots[s].asked < MAX_ASKS_PER_SLOT]
    if not open_slots:
        return Plan("answer", None, f"every unresolved slot was already asked {MAX_ASKS_PER_SLOT} times", "rule")
    return Plan("clarify", open_slots[0], f"slot {open_slots[0]} is {tracker.slots[open_slots[0]].state}", "rule")


def parse_observations(text: str) -> tuple[list[Observation], str | None]:
    obj, err = parse_json_object(text)
    if err:
        return [], err
    if not isinstance(obj.get("slots"), list):
        return [], "field 'slots' should be a list"
    obs = []
    for item in obj["slots"]:
        if isinstance(item, dict) and not require_fields(item, {"name": str, "status": str}):
            value = item.get("value") if isinstance(item.get("value"), str) else None
            obs.append(Observation(item["name"], item["status"], (value or "").strip() or None,
                                   bool(item.get("required", True))))
    return obs, None


def _field(text: str, name: str, allowed: Sequence[str] | None = None) -> tuple[str | None, str | None]:
    obj, err = parse_json_object(text)
    if not err:
        err = require_fields(obj, {name: str})
    if not err and allowed is not None and obj[name] not in allowed:
        err = f"field {name!r} = {obj[name]!r} not in {list(allowed)}"
    return (None, err) if err else (obj[name].strip(), None)


@dataclass
class _TurnState:
    """Working memory of one turn while the modules run."""

    index: int
    turn: DialogueTurn
    pred: Prediction
    tracker: Tracker | None
    dialogue: str
    request: str = ""
    latest: str = ""
    persona: str | None = None
    plan: Plan | None = None

    @property
    def alive(self) -> bool:
        return self.pred.status != "llm_error"


class ClarifyAgent:
    """ClarifyAgent or one of its ablations (a module switched off, never a copy of the agent)."""

    def __init__(self, settings: MethodSettings, perceiver: bool = True, forecaster: bool = True,
                 planner: bool = True):
        self.settings = settings
        self.use = {"input": True, "perceiver": perceiver, "forecaster": forecaster, "planner": planner,
                    "output": True}
        removed = [m for m in MODULES if not self.use[m]]
        if len(removed) > 1:
            raise ValueError(f"ablations remove one module at a time, got {removed}")
        self.name = METHOD + "".join(f"_no_{m}" for m in removed)
        self.calls_per_turn = sum(self.use.values())
        names = ["agent_" + m for m in MODULES if self.use[m]]
        joined = ",".join(load_prompt(n).version for n in names)
        self.prompt_version = f"{self.name}@{hashlib.sha256(joined.encode()).hexdigest()[:12]}"

    # ------------------------------------------------------------------ helpers
    def _request(self, module: str, schema: dict, **values: Any) -> ChatRequest:
        prompt = load_prompt(f"agent_{module}")
        return ChatRequest.of(prompt.messages(**values), prompt.version, schema, temperature=0.0,
                              max_tokens=self.settings.agent_max_tokens, seed=self.settings.seed)

    def _send(self, chat: ChatFn, jobs: list[tuple[_TurnState, str, ChatRequest]]) -> list[tuple[_TurnState, str, ChatResult | None]]:
        """One batch for every live turn's request; LLM errors fail the turn (its later steps are skipped)."""
        live = [(st, module, req) for st, module, req in jobs if st.alive]
        results = chat([req for _, _, req in live]) if live else []
        out = []
        for (st, module, _), res in zip(live, results, strict=True):
            st.pred.charge(res)
            st.pred.trace.setdefault("raw", {})[module] = res.text
            if res.error:
                st.pred.fail_llm(f"{module}: {res.error}")
                out.append((st, module, None))
            else:
                out.append((st, module, res))
        return out

    def _step_error(self, st: _TurnState, module: str, err: str) -> None:
        st.pred.trace.setdefault("step_errors", {})[module] = err

    # ------------------------------------------------------------------ the loop
    def predict(self, turns: Sequence[DialogueTurn], chat: ChatFn, embed: EmbedFn | None = None) -> list[Prediction]:
        preds = [Prediction(prompt_version=self.prompt_version) for _ in turns]
        trackers: dict[str, Tracker] = {}
        order = sorted(range(len(turns)), key=lambda i: (turns[i].turn, turns[i].dialogue_id))
        for t in sorted({turns[i].turn for i in order}):
            batch = []
            for i in order:
                if turns[i].turn != t:
                    continue
                tracker = None
                if self.use["perceiver"]:
                    tracker = trackers.setdefault(turns[i].dialogue_id, Tracker())
                batch.append(_TurnState(i, turns[i], preds[i], tracker, transcript(turns[i].history)))
            self._run_turn(batch, chat)
        return preds

    def _run_turn(self, batch: list[_TurnState], chat: ChatFn) -> None:
        # Input
        for st, _, res in self._send(chat, [(st, "input", self._request("input", INPUT_SCHEMA, dialogue=st.dialogue))
                                            for st in batch]):
            if res is None:
                continue
            obj, err = parse_json_object(res.text)
            err = err or require_fields(obj, {"request": str})
            users = [m["content"] for m in st.turn.history if m["role"] == "user"]
            if err:
                self._step_error(st, "input", err)
                st.request, st.latest = users[0] if users else "", users[-1] if users else ""
            else:
                st.request = obj["request"].strip()
                st.latest = (obj.get("latest") or "").strip() if isinstance(obj.get("latest"), str) else ""
                st.latest = st.latest or (users[-1] if users else "")
            st.pred.trace["input"] = {"request": st.request, "latest": st.latest}

        # Perceiver + Forecaster, one batch
        jobs = []
        for st in batch:
            if self.use["perceiver"]:
                jobs.append((st, "perceiver", self._request(
                    "perceiver", PERCEIVER_SCHEMA, request=st.request, latest=st.latest,
                    slots=st.tracker.describe())))
            replied = any(m["role"] == "assistant" for m in st.turn.history)
            if self.use["forecaster"] and replied:
                jobs.append((st, "forecaster", self._request(
                    "forecaster", FORECASTER_SCHEMA, dialogue=st.dialogue,
                    personas="\n".join(f"- {p.key}: {p.behaviour}" for p in PERSONAS))))
            elif self.use["forecaster"]:
                st.pred.trace["forecaster"] = "skipped: the user has not replied to a question yet"
        for st, module, res in self._send(chat, jobs):
            if res is None:
                continue
            if module == "perceiver":
                obs, err = parse_observations(res.text)
                if err:
                    self._step_error(st, "perceiver", err)
                moves = st.tracker.update(obs)
                st.pred.trace["perceiver"] = [o.__dict__ for o in obs]
                st.pred.trace["transitions"] = [m.__dict__ for m in moves]
            else:
                persona, err = _field(res.text, "persona", PERSONA_KEYS)
                if err:
                    self._step_error(st, "forecaster", err)
                st.persona = persona
                st.pred.trace["forecaster"] = persona

        # Tracker state -> Planner
        jobs = []
        for st in batch:
            if not st.alive:
                continue
            if st.tracker is not None:
                st.pred.agent |= {"slots": st.tracker.table(), "rsc": st.tracker.rsc}
            st.pred.agent["persona_forecast"] = st.persona
            if not self.use["planner"]:
                st.plan = rule_plan(st.tracker, st.persona)
                continue
            slots = st.tracker.describe() if st.tracker is not None else "(slot tracking unavailable)"
            rsc = ("unknown" if st.tracker is None else ("yes" if st.tracker.rsc else "no"))
            persona = st.persona or ("unknown" if self.use["forecaster"] else "not available")
            jobs.append((st, "planner", self._request(
                "planner", PLANNER_SCHEMA, dialogue=st.dialogue, request=st.request, slots=slots, rsc=rsc,
                persona=persona, persona_hint=PERSONA_HINTS.get(st.persona or "", ""))))
        for st, _, res in self._send(chat, jobs):
            if res is None:
                continue
            obj, err = parse_json_object(res.text)
            err = err or require_fields(obj, {"action": str})
            if not err and obj["action"] not in ("clarify", "answer"):
                err = f"action {obj['action']!r} is not clarify/answer"
            if err:
                self._step_error(st, "planner", err)
                fallback = rule_plan(st.tracker, st.persona)
                st.plan = Plan(fallback.action, fallback.target_slot, fallback.reason, "rule_fallback")
            else:
                target = obj.get("target_slot") if isinstance(obj.get("target_slot"), str) else ""
                st.plan = Plan(obj["action"], target.strip() or None, str(obj.get("reason", "")).strip(), "planner")

        # Output
        jobs = []
        for st in batch:
            if not st.alive or st.plan is None:
                continue
            unresolved = st.tracker.unresolved() if st.tracker is not None else []
            if st.plan.action == "clarify":
                target = st.plan.target_slot or (unresolved[0] if unresolved else None)
                if st.tracker is not None:
                    st.tracker.mark_asked(target)
                what = f"the {target.replace('_', ' ')}" if target else "what the user means"
                instruction = f"Ask the user one short clarifying question about {what}."
                assumptions: list[str] = []
            else:
                assumptions = [s.replace("_", " ") for s in unresolved]
                instruction = "Answer the user's request now." + (
                    f" Say which assumptions you make about: {', '.join(assumptions)}." if assumptions else "")
            st.pred.agent |= {"target_slot": slot_key(st.plan.target_slot or "") or None
                              if st.plan.action == "clarify" else None,
                              "decided_by": st.plan.decided_by, "assumptions": assumptions}
            st.pred.trace["plan"] = st.plan.__dict__
            jobs.append((st, "output", self._request("output", OUTPUT_SCHEMA, dialogue=st.dialogue,
                                                     request=st.request, instruction=instruction)))
        for st, _, res in self._send(chat, jobs):
            if res is None:
                continue
            st.pred.action = st.plan.action
            st.pred.raw_output = res.text
            text, err = _field(res.text, "text")
            if err:
                self._step_error(st, "output", err)
            assumptions = st.pred.agent.get("assumptions") or []
            if text and assumptions:
                text = f"{text} (Assuming nothing specific about: {', '.join(assumptions)}.)"
            st.pred.response = text

        for st in batch:
            st.pred.agent["step_errors"] = len(st.pred.trace.get("step_errors", {}))
            if st.pred.status == "llm_error":
                st.pred.action = "invalid"
