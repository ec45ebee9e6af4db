"""Robust parsing of model output: the paper's response-prefix protocol and JSON replies. Never raises."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

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


_FENCE_RE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)


def parse_json_object(raw: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """Return (object, None) or (None, reason). Accepts code fences and leading/trailing chatter."""
    text = (raw or "").strip()
    if not text:
        return None, "empty output"
    fenced = _FENCE_RE.search(text)
    candidates = [fenced.group(1)] if fenced else []
    start, end = text.find("{"), text.rfind("}")
    if start != -1 and end > start:
        candidates.append(text[start:end + 1])
    candidates.append(text)
    err = "no JSON object found"
    for cand in candidates:
        try:
            obj = json.loads(cand)
        except json.JSONDecodeError as e:
            err = f"invalid JSON: {e.msg} at char {e.pos}"
            continue
        if isinstance(obj, dict):
            return obj, None
        err = f"expected a JSON object, got {type(obj).__name__}"
    return None, err


def require_fields(obj: dict[str, Any], fields: dict[str, type]) -> str | None:
    """Reason the object lacks a field or has the wrong type / an empty string, else None."""
    for name, typ in fields.items():
        if name not in obj:
            return f"missing field {name!r}"
        value = obj[name]
        if not isinstance(value, typ) or isinstance(value, bool) and typ is not bool:
            return f"field {name!r} should be {typ.__name__}, got {type(value).__name__}"
        if isinstance(value, str) and not value.strip():
            return f"field {name!r} is empty"
    return None
