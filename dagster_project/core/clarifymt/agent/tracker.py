"""ClarifyAgent's Tracker: a finite-state machine over ambiguity slots (ClarifyMT-Bench §3.2, §6.1).

Each slot is in one of three states, ``unfilled``, ``filled`` or ``conflict``. Every turn the
Perceiver reports what it sees for some slots (an *observation*: a status and maybe a value), and the
Tracker moves each slot by the table below. The Required Slot Completion (RSC) condition (Eq. 3) holds
when every required slot is filled and no slot is in conflict.

    state \\ observed   filled                      unfilled     conflict
    (new slot)         filled                      unfilled     conflict
    unfilled           filled                      unfilled     conflict
    filled             filled (same value)         filled       conflict
                       conflict (different value)
    conflict           filled (the user settled it) conflict    conflict

A slot once filled is not forgotten when the Perceiver stops mentioning it (filled + unfilled stays
filled); a filled slot that receives a *different* value is a contradiction (-> conflict); a clear new
value resolves a conflict (-> filled). An empty table is "unknown", never "all slots filled": RSC needs at
least one tracked slot. The Tracker also counts how often the agent asked about each slot.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

STATES = ("unfilled", "filled", "conflict")
MAX_SLOTS = 8

TRANSITIONS: dict[tuple[str | None, str], str] = {
    (None, "filled"): "filled", (None, "unfilled"): "unfilled", (None, "conflict"): "conflict",
    ("unfilled", "filled"): "filled", ("unfilled", "unfilled"): "unfilled", ("unfilled", "conflict"): "conflict",
    ("filled", "filled"): "filled", ("filled", "unfilled"): "filled", ("filled", "conflict"): "conflict",
    ("conflict", "filled"): "filled", ("conflict", "unfilled"): "conflict", ("conflict", "conflict"): "conflict",
}


def slot_key(name: str) -> str:
    """Normalised slot name: lower case, words joined by '_' (so 'Start Date' and 'start date' are one slot)."""
    return "_".join(re.findall(r"[a-z0-9]+", (name or "").lower()))[:40]


def _same_value(a: str | None, b: str | None) -> bool:
    na, nb = (" ".join(re.findall(r"[a-z0-9]+", (x or "").lower())) for x in (a, b))
    return not na or not nb or na == nb  # an empty value never contradicts


@dataclass(frozen=True)
class Observation:
    """What the Perceiver reported for one slot this turn."""

    name: str
    status: str  # filled | unfilled | conflict
    value: str | None = None
    required: bool = True


@dataclass(frozen=True)
class Slot:
    name: str
    state: str
    value: str | None = None
    required: bool = True
    asked: int = 0


@dataclass(frozen=True)
class Transition:
    slot: str
    before: str | None
    observed: str
    after: str


def next_state(state: str | None, observed: str, old_value: str | None = None,
               new_value: str | None = None) -> str:
    """One FSM step; (filled, filled) becomes conflict when the values differ."""
    if observed not in STATES:
        raise ValueError(f"unknown observed status {observed!r}; expected one of {STATES}")
    if state == "filled" and observed == "filled" and not _same_value(old_value, new_value):
        return "conflict"
    return TRANSITIONS[(state, observed)]


@dataclass
class Tracker:
    slots: dict[str, Slot] = field(default_factory=dict)

    def update(self, observations: list[Observation]) -> list[Transition]:
        """Apply one turn's observations; returns what moved (for the trace). Unknown statuses are ignored."""
        moves = []
        for ob in observations:
            key = slot_key(ob.name)
            if not key or ob.status not in STATES:
                continue
            old = self.slots.get(key)
            if old is None and len(self.slots) >= MAX_SLOTS:
                continue
            state = next_state(old.state if old else None, ob.status, old.value if old else None, ob.value)
            value = ob.value if ob.status == "filled" and ob.value else (old.value if old else None)
            if ob.status == "conflict" and ob.value:
                value = ob.value
            required = ob.required or (old.required if old else False)
            self.slots[key] = Slot(key, state, value, required, old.asked if old else 0)
            moves.append(Transition(key, old.state if old else None, ob.status, state))
        return moves

    def mark_asked(self, name: str | None) -> None:
        key = slot_key(name or "")
        if key in self.slots:
            self.slots[key] = replace(self.slots[key], asked=self.slots[key].asked + 1)

    @property
    def rsc(self) -> bool:
        """Required Slot Completion: all required slots filled and no slot in conflict. An empty table means
        nothing is known about the request yet, so RSC does not hold (the agent asks)."""
        return bool(self.slots) and all(s.state == "filled" for s in self.slots.values() if s.required) and not any(
            s.state == "conflict" for s in self.slots.values())

    def unresolved(self) -> list[str]:
        """Slots that block RSC: conflicts first, then unfilled required slots, least-asked first."""
        conflicts = [s for s in self.slots.values() if s.state == "conflict"]
        missing = [s for s in self.slots.values() if s.required and s.state == "unfilled"]
        return [s.name for s in sorted(conflicts, key=lambda s: s.asked) + sorted(missing, key=lambda s: s.asked)]

    def table(self) -> list[dict[str, Any]]:
        return [{"name": s.name, "state": s.state, "value": s.value, "required": s.required, "asked": s.asked}
                for s in self.slots.values()]

    def describe(self) -> str:
        """The slot table as text for the Planner / Perceiver prompts."""
        if not self.slots:
            return "(no slots tracked yet)"
        return "\n".join(f"- {s.name}: {s.state}" + (f" = {s.value}" if s.value else "")
                         + ("" if s.required else " (optional)") for s in self.slots.values())

    def copy(self) -> Tracker:
        return Tracker(dict(self.slots))
