"""Prompt templates as files. A template's content hash is its version and part of every cache key."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from string import Template

from dagster_project.llm.chat import Message


@dataclass(frozen=True)
class Prompt:
    """A system + user template pair (``$name`` placeholders), versioned by content hash."""

    name: str
    system: str
    user: str

    @property
    def version(self) -> str:
        digest = hashlib.sha256(f"{self.system}\x00{self.user}".encode()).hexdigest()[:12]
        return f"{self.name}@{digest}"

    def messages(self, **values: object) -> list[Message]:
        """Render both parts; a missing placeholder raises KeyError naming it."""
        out = []
        if self.system.strip():
            out.append({"role": "system", "content": Template(self.system).substitute(values).strip()})
        out.append({"role": "user", "content": Template(self.user).substitute(values).strip()})
        return out


@cache
def load_prompt(name: str) -> Prompt:
    """Read ``<name>.txt``: a ``### system`` section then a ``### user`` section."""
    text = resources.files(__package__).joinpath(f"{name}.txt").read_text(encoding="utf-8")
    if "### user" not in text:
        raise ValueError(f"prompt {name}.txt has no '### user' section")
    head, user = text.split("### user", 1)
    system = head.split("### system", 1)[1] if "### system" in head else ""
    return Prompt(name, system.strip("\n"), user.strip("\n"))
