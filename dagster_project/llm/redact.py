"""Secrets out of everything the LLM layer stores or logs: API key values and common key patterns.

A server may echo the caller's key (a 401 body, a debugging proxy, a model repeating its prompt); the
client passes every error text and reply through `Redactor` before it reaches the cache, a table or a log.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

MASK = "[REDACTED]"
MIN_SECRET_LEN = 6  # shorter values ("x", "none") would mask ordinary words

# sk-/pk-/rk- style keys (OpenAI, Anthropic, Stripe-like), bearer tokens, and key=value / "key": "value" pairs
PATTERNS = (
    re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=\-]{8,}"),
    re.compile(r"(?i)(\b(?:api[_-]?key|access[_-]?token|authorization|x-api-key)[\"']?\s*[:=]\s*[\"']?)"
               r"[^\s\"',}]{8,}"),
)


class Redactor:
    """Masks the current values of the given environment variables and the key patterns above."""

    def __init__(self, env_names: Iterable[str]):
        self.env_names = sorted({n for n in env_names if n})

    def secrets(self) -> list[str]:
        """The variables' values now (read per call: a key set after start-up is still masked)."""
        values = {os.environ.get(n, "") for n in self.env_names}
        return sorted((v for v in values if len(v) >= MIN_SECRET_LEN), key=len, reverse=True)

    def __call__(self, text: str | None) -> str | None:
        if not text:
            return text
        for secret in self.secrets():
            text = text.replace(secret, MASK)
        for pattern in PATTERNS:
            text = pattern.sub(lambda m: (m.group(1) if m.lastindex else "") + MASK, text)
        return text
