"""The papers' free-text reply protocol: a reply opens with "The answer is" or "The clarifying question is"."""

from __future__ import annotations

import re
from dataclasses import dataclass

ANSWER_PREFIX = "The answer is"
CLARIFY_PREFIX = "The clarifying question is"

# Tolerates case, extra whitespace, markdown emphasis/quotes and a leading "Assistant:" label.
_LEAD = r"^[\s\"'*_>#`]*(?:assistant\s*:\s*)?[\s\"'*_`]*"
_CLARIFY_RE = re.compile(_LEAD + r"the\s+clarifying\s+question\s+is\b[\s:*_\"'`-]*", re.IGNORECASE)
_ANSWER_RE = re.compile(_LEAD + r"the\s+answer\s+is\b[\s:*_\"'`-]*", re.IGNORECASE)


@dataclass(frozen=True)
class Decision:
    action: str  # "clarify" | "answer" | "invalid"
    text: str  # the clarifying question or the answer, prefix removed; the raw reply when invalid


def parse_decision(raw: str | None) -> Decision:
    """Map a reply to clarify / answer / invalid by its required opening phrase."""
    text = (raw or "").strip()
    for action, pattern in (("clarify", _CLARIFY_RE), ("answer", _ANSWER_RE)):
        m = pattern.match(text)
        if m:
            return Decision(action, text[m.end():].strip())
    return Decision("invalid", text)
