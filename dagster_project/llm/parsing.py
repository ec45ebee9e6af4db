"""TEMPORARY during the redesign: replaced by dagster_project.llm.task (deleted when every step is migrated)."""

from __future__ import annotations

import json
import re
from typing import Any

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
