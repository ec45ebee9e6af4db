"""Prompt templates as files. A template's content hash is its version and part of every cache key.

A step that asks for a free-text or a JSON reply is one file: the shared text once, the passages that depend
on the reply format as ``$placeholders``, and a ``### formats`` section (YAML) giving each format's passages.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from string import Template
from typing import Literal

import yaml

from dagster_project.llm.chat import Message

ReplyFormat = Literal["text", "json"]
"""The reply formats a template's ``### formats`` section may define."""

FORMATS: tuple[ReplyFormat, ...] = ("text", "json")

VERSION_KEY = "version_name"
"""A format's optional key in ``### formats``: the name its version carries (the file's name if absent)."""


@dataclass(frozen=True)
class Prompt:
    """A system + user template pair (``$name`` placeholders), versioned by content hash.

    name is the template file's stem; version_name, when set, replaces it in the version (a format variant
    keeps the version its own file had before the formats were merged, so cached replies stay valid)."""

    name: str
    system: str
    user: str
    version_name: str | None = None

    @property
    def version(self) -> str:
        digest = hashlib.sha256(f"{self.system}\x00{self.user}".encode()).hexdigest()[:12]
        return f"{self.version_name or self.name}@{digest}"

    def messages(self, **values: object) -> list[Message]:
        """Render both parts; a missing placeholder raises KeyError naming it."""
        out = []
        if self.system.strip():
            out.append({"role": "system", "content": Template(self.system).substitute(values).strip()})
        out.append({"role": "user", "content": Template(self.user).substitute(values).strip()})
        return out


class PromptFormatError(Exception):
    """A template asked for without its format, for a format it does not define, or with a bad formats section.
    Not a ValueError: a task's render errors become input_error rows, while this is a mistake in the code."""


def _fill(text: str, values: dict[str, str]) -> str:
    """Substitute only the given placeholders; every other ``$name`` (and ``$$``) is left for rendering."""
    def one(m: re.Match[str]) -> str:
        key = m.group("named") or m.group("braced")
        return values[key] if key in values else m.group(0)
    return Template.pattern.sub(one, text)


def _formats(name: str, raw: str) -> dict[str, dict[str, str]]:
    """The ``### formats`` section of ``<name>.txt``: format -> {placeholder: passage}, checked for shape."""
    where = f"prompt {name}.txt, section '### formats'"
    try:
        doc = yaml.safe_load(raw)
    except yaml.YAMLError as e:
        raise PromptFormatError(f"{where}: not valid YAML ({e})") from e
    if not isinstance(doc, dict) or not doc:
        raise PromptFormatError(f"{where}: expected a mapping of format name -> passages")
    keys: set[str] | None = None
    for fmt, passages in doc.items():
        if fmt not in FORMATS:
            raise PromptFormatError(f"{where}: unknown format {fmt!r} (known: {', '.join(FORMATS)})")
        if not isinstance(passages, dict) or not all(isinstance(v, str) for v in passages.values()):
            raise PromptFormatError(f"{where}: format {fmt!r} must map placeholder names to text")
        own = set(passages) - {VERSION_KEY}
        if keys is not None and own != keys:
            raise PromptFormatError(f"{where}: format {fmt!r} sets {sorted(own)}, the others {sorted(keys)}")
        keys = own
    return doc


def _sections(name: str, text: str) -> tuple[str, str, dict[str, dict[str, str]] | None]:
    """(system, user, formats or None) of the text of ``<name>.txt``."""
    text, has_formats, formats = text.partition("### formats")
    if "### user" not in text:
        raise ValueError(f"prompt {name}.txt has no '### user' section")
    head, user = text.split("### user", 1)
    system = head.split("### system", 1)[1] if "### system" in head else ""
    return system.strip("\n"), user.strip("\n"), _formats(name, formats) if has_formats else None


def parse_prompt(name: str, text: str, fmt: ReplyFormat | None = None) -> Prompt:
    """The template ``<name>.txt`` with this text: a ``### system`` section, a ``### user`` section and, for a step
    with a text and a JSON variant, a ``### formats`` section; ``fmt`` picks the variant (needed exactly then)."""
    system, user, formats = _sections(name, text)
    if formats is None:
        if fmt is not None:
            raise PromptFormatError(f"prompt {name}.txt has no '### formats' section, so no format {fmt!r}")
        return Prompt(name, system, user)
    if fmt is None:
        raise PromptFormatError(f"prompt {name}.txt needs a reply format: one of {', '.join(formats)}")
    if fmt not in formats:
        raise PromptFormatError(f"prompt {name}.txt has no format {fmt!r} (it has: {', '.join(formats)})")
    passages = {k: v for k, v in formats[fmt].items() if k != VERSION_KEY}
    unused = sorted(set(passages) - set(Template(f"{system}\n{user}").get_identifiers()))
    if unused:
        raise PromptFormatError(f"prompt {name}.txt: format passages {unused} have no placeholder in the text")
    return Prompt(name, _fill(system, passages), _fill(user, passages), formats[fmt].get(VERSION_KEY))


@cache
def _text(name: str) -> str:
    return resources.files(__package__).joinpath(f"{name}.txt").read_text(encoding="utf-8")


@cache
def load_prompt(name: str, fmt: ReplyFormat | None = None) -> Prompt:
    """Read ``<name>.txt`` (see parse_prompt); ``fmt`` picks the reply format of a template written for both."""
    return parse_prompt(name, _text(name), fmt)


def prompt_formats(name: str) -> tuple[ReplyFormat, ...]:
    """The reply formats ``<name>.txt`` defines, in file order (none for a template without a formats section)."""
    return tuple(_sections(name, _text(name))[2] or ())
