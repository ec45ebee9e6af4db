"""Exports -> TRL conversational rows. SFT rows are prompt/completion (one per assistant message, the history
before it as prompt), so the loss covers only what the assistant says: TRL's `assistant_only_loss` fails with
SmolLM2's chat template (no generation markers). DPO rows are prompt/chosen/rejected message lists. TRL applies
the chat template itself."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

from dagster_project.io.records import InputFileError

ROLES = ("system", "user", "assistant")
Row = dict[str, Any]


def _messages(value: Any, source: str, index: int, field: str) -> list[dict[str, str]]:
    """A validated message list: dicts with a known role and non-empty string content."""
    if not isinstance(value, Sequence) or isinstance(value, str) or not value:
        raise InputFileError(source, "expected a non-empty list of {role, content} messages", index, field)
    out = []
    for k, m in enumerate(value):
        where = f"{field}[{k}]"
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise InputFileError(source, f"a message needs role in {list(ROLES)}, got {m!r:.120}", index, where)
        if not isinstance(m.get("content"), str) or not m["content"].strip():
            raise InputFileError(source, "message content must be a non-empty string", index, where)
        out.append({"role": m["role"], "content": m["content"]})
    return out


def trl_sft_rows(records: Iterable[Row], source: str) -> list[Row]:
    """One prompt/completion row per assistant message of each `messages` record (or a record that is already
    prompt/completion); a record without an assistant message after a user message is an error naming it."""
    out = []
    for i, rec in enumerate(records, start=1):
        if not isinstance(rec, dict):
            raise InputFileError(source, f"expected an object, got {type(rec).__name__}", i)
        if "prompt" in rec and "completion" in rec:
            prompt = _messages(rec["prompt"], source, i, "prompt")
            completion = _messages(rec["completion"], source, i, "completion")
            out.append({"prompt": prompt, "completion": completion})
            continue
        if "messages" not in rec:
            raise InputFileError(source, "no `messages` (or `prompt` + `completion`) field", i)
        msgs = _messages(rec["messages"], source, i, "messages")
        turns = [k for k, m in enumerate(msgs) if m["role"] == "assistant"
                 and any(p["role"] == "user" for p in msgs[:k])]
        if not turns:
            raise InputFileError(source, "no assistant message after a user message", i, "messages")
        out.extend({"prompt": msgs[:k], "completion": [msgs[k]]} for k in turns)
    return out


def trl_dpo_rows(records: Iterable[Row], source: str) -> tuple[list[Row], list[int]]:
    """prompt / chosen / rejected message lists, validated; and the record numbers left out because chosen and
    rejected are the same reply (no preference to learn; two sampled candidates can be equal)."""
    out, same = [], []
    for i, rec in enumerate(records, start=1):
        if not isinstance(rec, dict):
            raise InputFileError(source, f"expected an object, got {type(rec).__name__}", i)
        row = {f: _messages(rec.get(f), source, i, f) for f in ("prompt", "chosen", "rejected")}
        if row["chosen"] == row["rejected"]:
            same.append(i)
        else:
            out.append(row)
    return out, same


def data_sha256(rows: Sequence[Row]) -> str:
    """sha256 of the rows as canonical JSON: equal training data, equal hash (the skip test of a rerun)."""
    h = hashlib.sha256()
    for row in rows:
        h.update(json.dumps(row, sort_keys=True, ensure_ascii=False).encode())
        h.update(b"\n")
    return h.hexdigest()
