"""ClariLM §3.2.1 (FM-LOG data), step 2: the extractor judges each prefilter candidate and extracts the
(q_i, c, q_{i+1}, f) tuple. One prompt per source (logs.SOURCES), each with 3 positive and 4 negative
demonstrations: user_refinement (the paper's: the LLM writes c and f from two consecutive user questions)
and assistant_asked (c is the logged assistant question, and is checked against the logged turn)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Annotated, Any

import polars as pl
from pydantic import BeforeValidator, ConfigDict

from dagster_project.config import LogsConfig
from dagster_project.llm.task import Chat, LLMTask, Reply, Status, ask_all, text_field


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
EXTRACT_REFINEMENT = LLMTask("clarilm_extract_refinement", role="extractor", reply=Extraction,
                             sampling={"max_tokens": 256})
TASKS = {"assistant_asked": EXTRACT, "user_refinement": EXTRACT_REFINEMENT}

EXTRACTION_COLUMNS = {
    "candidate_id": pl.Utf8, "conversation_id": pl.Utf8, "turn_index": pl.Int64,
    "is_clarification": pl.Boolean, "q_i": pl.Utf8, "c": pl.Utf8, "q_next": pl.Utf8, "facet": pl.Utf8,
    "filled_from_log": pl.List(pl.Utf8), "c_in_log": pl.Boolean, "kept": pl.Boolean, "reject_reason": pl.Utf8,
    "status": pl.Utf8, "error": pl.Utf8, "raw_output": pl.Utf8, "model": pl.Utf8, "prompt_version": pl.Utf8,
    "source": pl.Utf8, "log_file": pl.Utf8, "log_date": pl.Date,
}
BASE = ("candidate_id", "conversation_id", "turn_index", "source", "log_file", "log_date")
NOT_IN_LOG = "question_not_in_log"
PROMPT_ECHO = "prompt_echo"


def _clip(text: str, limit: int = 1200) -> str:
    """Head and tail of a long text (a clarifying question often closes a long assistant turn)."""
    return text if len(text) <= limit else text[:limit // 2] + " ... " + text[-limit // 2:]


def _words(text: str) -> str:
    """Lower-case words only, so quoting, punctuation and spacing do not decide whether a text was logged."""
    return " ".join(re.findall(r"[^\W_]+", text.lower()))


def in_log(question: str, logged_turn: str) -> bool:
    """The question (as words) appears in the logged assistant turn."""
    words = _words(question)
    return bool(words) and f" {words} " in f" {_words(logged_turn)} "


def demonstration_texts(*tasks: LLMTask[Any]) -> frozenset[str]:
    """The demonstrations' texts in the tasks' prompts (every quoted q_i, c, q_next, facet and "e.g." example of
    two words or more), as words; the placeholders of the pair being judged left out."""
    quoted = (q for task in tasks for part in (task.template.system, task.template.user)
              for q in re.findall(r'(?<![\w"])(?:q_i|q_next|c|facet|e\.g\.):?\s*"([^"$]+)"', part))
    return frozenset(w for w in map(_words, quoted) if len(w.split()) >= 2)


DEMONSTRATIONS = demonstration_texts(EXTRACT, EXTRACT_REFINEMENT)


def prompt_echo(candidate: dict[str, Any], question: str | None, facet: str | None,
                question_logged: bool | None) -> str | None:
    """Why an extraction copies the prompt instead of the log, or None: a clarifying question that is a
    demonstration's text (unless the log itself holds it), or a facet that is a demonstration's text and whose
    words the logged exchange does not contain."""
    demos = DEMONSTRATIONS
    if question and not question_logged and _words(question) in demos:
        return f"the clarifying question repeats the prompt's demonstrations: {question!r}"
    logged = " ".join(_words(str(candidate.get(k) or "")) for k in ("query", "clarifying_question", "reply"))
    if facet and _words(facet) in demos and f" {_words(facet)} " not in f" {logged} ":
        return f"the facet repeats the prompt's demonstrations: {facet!r}"
    return None


def tuple_fields(candidate: dict[str, Any], status: Status, value: Extraction | None,
                 error: str | None) -> dict[str, Any]:
    """A verdict -> tuple fields, status and reject_reason.

    - no usable reply -> its status (parse_error / llm_error) is the reject_reason
    - is_clarification false -> ok, not kept (reject_reason not_clarification)
    - is_clarification true but no facet -> parse_error (a tuple without f is unusable)
    - assistant_asked: an empty q_i / c / q_{i+1} is filled from the log (listed in filled_from_log); a c that
      does not appear in the logged assistant turn is an invented question: parse_error, question_not_in_log
    - user_refinement: c is the LLM's own question (nothing logged to check); without one -> parse_error
    - a clarifying question or facet copied from the prompt's demonstrations (`prompt_echo`) -> ok, not kept
      (reject_reason prompt_echo), as the benchmark's validation removes echoed queries
    """
    out: dict[str, Any] = {"is_clarification": None, "q_i": None, "c": None, "q_next": None, "facet": None,
                           "filled_from_log": [], "c_in_log": None, "kept": False, "reject_reason": None,
                           "status": status.value, "error": error}
    if value is None:
        return out | {"reject_reason": status.value}
    out["is_clarification"] = value.is_clarification
    if not value.is_clarification:
        return out | {"reject_reason": "not_clarification"}
    bad = Status.PARSE_ERROR.value
    if not value.facet:
        return out | {"status": bad, "error": "partial: is_clarification true but no facet", "reject_reason": bad}
    refinement = candidate.get("source") == "user_refinement"
    if refinement and not value.clarifying_question:
        return out | {"status": bad, "error": "partial: is_clarification true but no clarifying question",
                      "reject_reason": bad}
    filled = []
    texts = {}
    for name, col, logged in (("query", "q_i", "query"), ("clarifying_question", "c", "clarifying_question"),
                              ("refined_query", "q_next", "reply")):
        texts[col] = getattr(value, name) or candidate[logged]
        if not getattr(value, name):
            filled.append(col)
    if not refinement:
        out["c_in_log"] = "c" in filled or in_log(value.clarifying_question, candidate["clarifying_question"])
        if not out["c_in_log"]:
            return out | texts | {"status": bad, "reject_reason": NOT_IN_LOG, "filled_from_log": filled,
                                  "error": "the clarifying question is not in the logged assistant turn"}
    echo = prompt_echo(candidate, value.clarifying_question, value.facet, out["c_in_log"])
    if echo:
        return out | texts | {"facet": value.facet, "filled_from_log": filled, "reject_reason": PROMPT_ECHO,
                              "error": echo}
    return out | texts | {"facet": value.facet, "filled_from_log": filled, "kept": True}


def parse_extraction(candidate: dict[str, Any], raw: str | None) -> dict[str, Any]:
    """One reply text -> tuple fields and status. Never raises."""
    parsed = TASKS[candidate.get("source") or "assistant_asked"].parse(raw, candidate)
    return tuple_fields(candidate, parsed.status, parsed.value, parsed.error)


def _values(r: dict[str, Any]) -> dict[str, str]:
    if r["source"] == "user_refinement":
        return {"query": _clip(r["query"]), "reply": _clip(r["reply"])}
    return {"query": _clip(r["query"]), "assistant_turn": _clip(r["clarifying_question"]), "reply": _clip(r["reply"])}


def extract(chat: Chat, candidates: pl.DataFrame, temperature: float = 0.0) -> pl.DataFrame:
    """One extractor request per candidate with its source's prompt (one batch, in order) -> one row each."""
    items = candidates.to_dicts()
    asks = [TASKS[r["source"]].ask(r, _values(r), temperature=temperature) for r in items]
    rows = [{k: o.item[k] for k in BASE} | o.provenance() | tuple_fields(o.item, o.status, o.value, o.error)
            for a in ask_all(chat, "extractor", asks) for o in a.outcomes]
    return pl.DataFrame(rows, schema=EXTRACTION_COLUMNS)


def skipped_extractions(candidates: pl.DataFrame, limit: int) -> pl.DataFrame:
    """Candidates over logs.max_extractions: rows with status 'skipped', so nothing disappears."""
    return candidates.select(*BASE).with_columns(
        kept=pl.lit(False), status=pl.lit("skipped"), reject_reason=pl.lit("skipped"),
        error=pl.lit(f"over logs.max_extractions={limit}"))


def extract_stream(chat: Chat, batches: Iterable[pl.DataFrame], cfg: LogsConfig) -> Iterator[pl.DataFrame]:
    """One day's kept candidates (of the sources in logs.sources, in batches, the ones to judge first) -> extraction
    rows batch by batch, in EXTRACTION_COLUMNS: the first logs.max_extractions are extracted, the rest become
    'skipped' rows, so memory holds one batch whatever the size of the day."""
    limit, done = cfg.max_extractions, 0
    empty = pl.DataFrame(schema=EXTRACTION_COLUMNS)
    for cands in batches:
        room = cands.height if limit is None else max(0, limit - done)
        todo, skipped = cands.head(room), cands.slice(room)
        done += todo.height
        if todo.height:
            yield extract(chat, todo, cfg.extraction_temperature)
        if skipped.height:
            yield pl.concat([empty, skipped_extractions(skipped, limit)], how="diagonal_relaxed")
