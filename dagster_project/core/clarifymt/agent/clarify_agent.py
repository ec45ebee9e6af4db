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
Planner reply cannot be parsed (``decided_by = "rule_fallback"``). An empty slot table (the Perceiver found
nothing, or its reply was unusable) is unknown, not complete: the rule asks and the Planner sees RSC
"unknown". Every intermediate is kept per row.

Decision channel (evaluation.structured_output), the same as every baseline's: the agent's final decision is
the Output module's reply, which the user sees. With false (the paper's default) it is free text read by the
one protocol parser ("The answer is" / "The clarifying question is"); with true it is the baselines' JSON
decision {action, text}. The Planner's choice is the Output's instruction, not the decision: an Output reply
that breaks the channel makes the turn `invalid` (parse_error, counted wrong), exactly as a baseline's broken
reply; an Output that decides otherwise than the plan is recorded (`output_vs_plan` in the trace) and its
decision stands. The four internal modules always reply in JSON; one that fails to parse falls back and is a
step error, recorded in `error`, `step_errors` and protocol_ok (the share of the turn's module replies that
parsed).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dagster_project.config import EvaluationConfig
from dagster_project.core.clarifymt.agent.method import (
    NOT_PROTOCOL,
    DialogueTurn,
    Prediction,
    ask,
    decision_of,
    transcript,
)
from dagster_project.core.clarifymt.agent.modules import (
    MODULES,
    PERSONA_KEYS,
    OUTPUT_TEXT,
    TASKS,
    observations,
    text_or_empty,
)
from dagster_project.core.clarifymt.agent.tracker import Tracker, slot_key
from dagster_project.core.shared.dedup import Embed
from dagster_project.llm.task import Chat, Outcome, Status

METHOD = "clarify_agent"
MAX_ASKS_PER_SLOT = 2  # the Planner's rule stops asking about a slot the agent already asked twice
USER_TYPES = {
    # the paper's six persona labels (§6, Forecaster), each glossed by what the reply shows, in the agent's own
    # words: never the user simulator's persona text, and never what the assistant should do about it
    "precise": "the response supplies the requested information in clear terms",
    "partial_vague": "the response is hedged or incomplete and leaves the point open",
    "off_focus": "the response is about something other than the question it was given",
    "contradictory": "the response is inconsistent, within itself or with what the user said before",
    "factually_wrong": "the response states details that are not true",
    "refusal": "the response declines to provide the requested information",
}


if list(USER_TYPES) != PERSONA_KEYS:
    raise ImportError("clarify_agent.USER_TYPES must gloss exactly the persona labels, in order")


def user_types() -> str:
    """The Forecaster's list of user types: one '- key: gloss' line each."""
    return "\n".join(f"- {key}: {gloss}" for key, gloss in USER_TYPES.items())


@dataclass(frozen=True)
class Plan:
    action: str  # clarify | answer
    target_slot: str | None
    reason: str
    decided_by: str  # planner | rule | rule_fallback


def rule_plan(tracker: Tracker | None, persona: str | None) -> Plan:
    """The plan without an LLM Planner, from the paper's description of the Planner (§6: answer when RSC holds or
    further clarification is unlikely to yield more information): answer when RSC holds, when the Forecaster sees a
    user who declines to give more, or when every unresolved slot was asked MAX_ASKS_PER_SLOT times; else ask."""
    if persona == "refusal":
        return Plan("answer", None, "the user declines to clarify", "rule")
    if tracker is None or not tracker.slots:
        return Plan("clarify", None, "no slot information; the request may still be ambiguous", "rule")
    if tracker.rsc:
        return Plan("answer", None, "all required slots are filled and nothing conflicts (RSC)", "rule")
    open_slots = [s for s in tracker.unresolved() if tracker.slots[s].asked < MAX_ASKS_PER_SLOT]
    if not open_slots:
        return Plan("answer", None, f"every unresolved slot was already asked {MAX_ASKS_PER_SLOT} times", "rule")
    return Plan("clarify", open_slots[0], f"slot {open_slots[0]} is {tracker.slots[open_slots[0]].state}", "rule")


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
        return self.pred.status != Status.LLM_ERROR

    def step_error(self, module: str, err: str | None) -> None:
        self.pred.trace.setdefault("step_errors", {})[module] = err


Job = tuple[_TurnState, str, dict[str, Any]]


class ClarifyAgent:
    """ClarifyAgent or one of its ablations (a module switched off, never a copy of the agent)."""

    def __init__(self, cfg: EvaluationConfig, role: str = "subject", perceiver: bool = True,
                 forecaster: bool = True, planner: bool = True):
        self.cfg, self.role = cfg, role
        self.use = {"input": True, "perceiver": perceiver, "forecaster": forecaster, "planner": planner,
                    "output": True}
        removed = [m for m in MODULES if not self.use[m]]
        if len(removed) > 1:
            raise ValueError(f"ablations remove one module at a time, got {removed}")
        self.name = METHOD + "".join(f"_no_{m}" for m in removed)
        self.calls_per_turn = sum(self.use.values())
        self.tasks = TASKS if cfg.structured_output else {**TASKS, "output": OUTPUT_TEXT}
        joined = ",".join(self.tasks[m].version for m in MODULES if self.use[m])
        self.prompt_version = f"{self.name}@{hashlib.sha256(joined.encode()).hexdigest()[:12]}"

    def _send(self, chat: Chat, jobs: list[Job]) -> list[tuple[_TurnState, str, Outcome[Any, Any]]]:
        """One batch for every live turn's module request; an LLM error fails the turn (its later steps are
        skipped), so only the answered (turn, module, outcome) come back."""
        answers = ask(chat, self.role, [((st, module), self.tasks[module], values) for st, module, values in jobs
                                        if st.alive], max_tokens=self.cfg.agent_max_tokens, seed=self.cfg.sample_seed)
        out = []
        for a in answers:
            st, module = a.item
            st.pred.charge(a.result)
            st.pred.trace.setdefault("raw", {})[module] = a.result.text
            if a.result.error:
                st.pred.fail_llm(f"{module}: {a.result.error}")
            else:
                out.append((st, module, a.first))
        return out

    # ------------------------------------------------------------------ the loop
    def predict(self, turns: Sequence[DialogueTurn], chat: Chat, embed: Embed | None = None) -> list[Prediction]:
        """Every turn, turn number by turn number, each module one batch; trackers carried per dialogue."""
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

    def _run_turn(self, batch: list[_TurnState], chat: Chat) -> None:
        self._input(batch, chat)
        self._perceive_and_forecast(batch, chat)
        self._plan(batch, chat)
        self._output(batch, chat)
        for st in batch:
            errors = st.pred.trace.get("step_errors", {})
            replies = len(st.pred.trace.get("raw", {}))
            st.pred.agent["step_errors"] = len(errors)
            if st.pred.status == Status.LLM_ERROR:
                st.pred.action = "invalid"
                continue
            st.pred.protocol_ok = (replies - len(errors)) / replies if replies else None
            if errors:
                fallback = " (planned by the rule)" if "planner" in errors else ""
                st.pred.error = "step errors: " + "; ".join(f"{m}: {e}" for m, e in errors.items()) + fallback

    def _input(self, batch: list[_TurnState], chat: Chat) -> None:
        for st, _, o in self._send(chat, [(st, "input", {"dialogue": st.dialogue}) for st in batch]):
            users = [m["content"] for m in st.turn.history if m["role"] == "user"]
            if not o.ok:
                st.step_error("input", o.error)
                st.request, st.latest = users[0] if users else "", users[-1] if users else ""
            else:
                st.request = o.value.request.strip()
                st.latest = text_or_empty(o.value.latest) or (users[-1] if users else "")
            st.pred.trace["input"] = {"request": st.request, "latest": st.latest}

    def _perceive_and_forecast(self, batch: list[_TurnState], chat: Chat) -> None:
        """Perceiver and Forecaster requests of a turn go out in one batch (both read only the Input's summary)."""
        jobs: list[Job] = []
        for st in batch:
            if self.use["perceiver"]:
                jobs.append((st, "perceiver", {"request": st.request, "latest": st.latest,
                                               "slots": st.tracker.describe()}))
            replied = any(m["role"] == "assistant" for m in st.turn.history)
            if self.use["forecaster"] and replied:
                jobs.append((st, "forecaster", {"dialogue": st.dialogue, "personas": user_types()}))
            elif self.use["forecaster"]:
                st.pred.trace["forecaster"] = "skipped: the user has not replied to a question yet"
        for st, module, o in self._send(chat, jobs):
            if not o.ok:
                st.step_error(module, o.error)
            if module == "perceiver":
                obs = observations(o.value) if o.ok else []
                moves = st.tracker.update(obs)
                st.pred.trace["perceiver"] = [ob.__dict__ for ob in obs]
                st.pred.trace["transitions"] = [m.__dict__ for m in moves]
            else:
                st.persona = o.value.persona.strip() if o.ok else None
                st.pred.trace["forecaster"] = st.persona

    def _plan(self, batch: list[_TurnState], chat: Chat) -> None:
        """Tracker state -> Planner (or the rule, in the no-planner ablation and when a reply is unusable)."""
        jobs: list[Job] = []
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
            rsc = ("unknown" if st.tracker is None or not st.tracker.slots else ("yes" if st.tracker.rsc else "no"))
            persona = st.persona or ("unknown" if self.use["forecaster"] else "not available")
            jobs.append((st, "planner", {"dialogue": st.dialogue, "request": st.request, "slots": slots, "rsc": rsc,
                                         "persona": persona}))
        for st, _, o in self._send(chat, jobs):
            if not o.ok:
                st.step_error("planner", o.error)
                fallback = rule_plan(st.tracker, st.persona)
                st.plan = Plan(fallback.action, fallback.target_slot, fallback.reason, "rule_fallback")
            else:
                st.plan = Plan(o.value.action, text_or_empty(o.value.target_slot) or None,
                               str(o.value.reason).strip(), "planner")

    def _output(self, batch: list[_TurnState], chat: Chat) -> None:
        jobs: list[Job] = []
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
            jobs.append((st, "output", {"dialogue": st.dialogue, "request": st.request, "instruction": instruction}))
        for st, _, o in self._send(chat, jobs):
            self._decide(st, o)

    def _decide(self, st: _TurnState, o: Outcome[Any, Any]) -> None:
        """The turn's decision is the Output reply's, read like a baseline's reply in the run's channel: a reply
        that breaks it is `invalid` (parse_error); one that differs from the plan is recorded and stands."""
        st.pred.raw_output = o.raw_output
        d = decision_of(o)
        st.pred.trace["output_decision"] = d.action
        if d.action == "invalid":
            st.step_error("output", o.error or NOT_PROTOCOL)
            st.pred.action, st.pred.status = "invalid", Status.PARSE_ERROR.value
            st.pred.response = d.text.strip() or None
            return
        if d.action != st.plan.action:
            st.pred.trace["output_vs_plan"] = f"reply: {d.action}, plan: {st.plan.action}"
        st.pred.action = d.action
        text = d.text.strip() or None
        assumptions = st.pred.agent.get("assumptions") or []
        if text and assumptions and d.action == "answer":
            text = f"{text} (Assuming nothing specific about: {', '.join(assumptions)}.)"
        st.pred.response = text
