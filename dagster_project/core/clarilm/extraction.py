"""ClariLM §3.2.1 (FM-LOG data), step 2: the extractor judges each prefilter candidate and extracts the
(q_i, c, q_{i+1}, f) tuple; the prompt file holds the 3 positive and 4 negative demonstrations."""

from __future__ import annotations

from typing import Annotated, Any

import polars as pl
from pydantic import BeforeValidator, ConfigDict

from dagster_project.config import LogsConfig
from dagster_project.llm.task import Chat, LLMTask, Reply, Status, text_field


def _flag(value: Any) -> Any:
    """'true' / 'false' as strings count as booleans (small models quote them)."""
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return value


def _text(value: Any) -> str:
    """A missing or non-string text is empty: the logged text fills the gap."""
    return value.strip() if isinstance(value, str) else ""


LogText = Annotated[str, BeforeValidator(_text)]
REQUIRED = ["is_clarification", "query", "clarifying_question", "refined_query", "facet"]


class Extraction(Reply):
    """The extractor's verdict; only is_clarification must be there, the texts may be empty or missing."""

    model_config = ConfigDict(json_schema_extra=lambda schema, _: schema.update(required=REQUIRED))

    is_clarification: Annotated[bool, BeforeValidator(_flag)]
    query: LogText = text_field(300, default="")
    clarifying_question: LogText = text_field(300, default="")
    refined_query: LogText = text_field(300, default="")
    facet: LogText = text_field(80, default="")


EXTRACT = LLMTask("clarilm_extract_clarification", role="extractor", reply=Extraction,
                  sampling={"max_tokens": 256})

EXTRACTION_COLUMNS = {
    "candidate_id": pl.Utf8, "conversation_id": pl.Utf8, "turn_index": pl.Int64,
    "is_clarification": pl.Boolean, "q_i": pl.Utf8, "c": pl.Utf8, "q_next": pl.Utf8, "facet": pl.Utf8,
    "filled_from_log": pl.List(pl.Utf8), "kept": pl.Boolean, "reject_reason": pl.Utf8,
    "status": pl.Utf8, "error": pl.Utf8, "raw_output": pl.Utf8, "model": pl.Utf8, "prompt_version": pl.Utf8,
    "source": pl.Utf8, "log_date": pl.Date,
}
BASE = ("candidate_id", "conversation_id", "turn_index", "source", "log_date")


def _clip(text: str, limit: int = 1200) -> str:
    return text if len(text) <= limit else text[:limit] + " ..."


def tuple_fields(candidate: dict[str, Any], status: Status, value: Extraction | None,
                 error: str | None) -> dict[str, Any]:
    """A verdict -> tuple fields, status and reject_reason.

    - no usable reply -> its status (parse_error / llm_error) is the reject_reason
    - is_clarification false -> ok, not kept (reject_reason not_clarification)
    - is_clarification true but no facet -> parse_error (a tuple without f is unusable)
    - true with empty q_i / c / q_{i+1} -> ok; the logged text fills the gap (listed in filled_from_log)
    """
    out: dict[str, Any] = {"is_clarification": None, "q_i": None, "c": None, "q_next": None, "facet": None,
                           "filled_from_log": [], "kept": False, "reject_reason": None, "status": status.value,
                           "error": error}
    if value is None:
        return out | {"reject_reason": status.value}
    out["is_clarification"] = value.is_clarification
    if not value.is_clarification:
        return out | {"reject_reason": "not_clarification"}
    if not value.facet:
        return out | {"status": Status.PARSE_ERROR.value, "error": "partial: is_clarification true but no facet",
                      "reject_reason": Status.PARSE_ERROR.value}
    filled = []
    texts = {}
    for name, col, logged in (("query", "q_i", "query"), ("clarifying_question", "c", "clarifying_question"),
                              ("refined_query", "q_next", "reply")):
        texts[col] = getattr(value, name) or candidate[logged]
        if not getattr(value, name):
            filled.append(col)
    return out | texts | {"facet": value.facet, "filled_from_log": filled, "kept": True}


def parse_extraction(candidate: dict[str, Any], raw: str | None) -> dict[str, Any]:
    """One reply text -> tuple fields and status. Never raises."""
    parsed = EXTRACT.parse(raw, candidate)
    return tuple_fields(candidate, parsed.status, parsed.value, parsed.error)


def extract(chat: Chat, candidates: pl.DataFrame, temperature: float = 0.0) -> pl.DataFrame:
    """One extractor request per candidate (in order) -> one row each, with provenance."""
    out = EXTRACT.run(chat, candidates.to_dicts(),
                      lambda r: {"query": _clip(r["query"]), "assistant_turn": _clip(r["clarifying_question"]),
                                 "reply": _clip(r["reply"])},
                      lambda _: {"temperature": temperature})
    rows = [{k: o.item[k] for k in BASE} | o.provenance() | tuple_fields(o.item, o.status, o.value, o.error)
            for o in out]
    return pl.DataFrame(rows, schema=EXTRACTION_COLUMNS)


def skipped_extractions(candidates: pl.DataFrame, limit: int) -> pl.DataFrame:
    """Candidates over logs.max_extractions: rows with status 'skipped', so nothing disappears."""
    return candidates.select(*BASE).with_columns(
        kept=pl.lit(False), status=pl.lit("skipped"), reject_reason=pl.lit("skipped"),
        error=pl.lit(f"over logs.max_extractions={limit}"))


def extract_day(chat: Chat, candidates: pl.DataFrame, cfg: LogsConfig) -> pl.DataFrame:
    """The kept candidates of one day, in candidate_id order, up to logs.max_extractions; the rest are
    'skipped' rows."""
    cands = candidates.filter(pl.col("kept")).sort("candidate_id")
    limit = cfg.max_extractions
    todo, skipped = (cands.head(limit), cands.slice(limit)) if limit else (cands, cands.clear())
    out = extract(chat, todo, cfg.extraction_temperature)
    if skipped.height:
        out = pl.concat([out, skipped_extractions(skipped, limit)], how="diagonal_relaxed")
    return out
