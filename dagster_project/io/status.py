"""The one type of a row's `status`: what became of an input record or an LLM step (every table's `status`
column holds one of these values). Lives in io/, the lowest layer that makes rows, so every layer can use it."""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """What became of one row. A StrEnum: `Status.OK == "ok"`, and it is stored in Parquet as the plain value."""

    OK = "ok"
    PARSE_ERROR = "parse_error"  # the model answered, but not in a usable form
    LLM_ERROR = "llm_error"  # no answer: the backend failed after its retries
    INPUT_ERROR = "input_error"  # no request was sent: the input item could not be rendered


STATUSES: tuple[str, ...] = tuple(s.value for s in Status)
