"""ClarifyMT-Bench §4.1: single-turn ambiguous queries + clarifying questions, quality-rated, deduplicated."""

from __future__ import annotations

import polars as pl

from dagster_project.llm.chat import ChatRequest, ChatResult
from dagster_project.llm.parsing import parse_json_object, require_fields
from dagster_project.llm.prompts import load_prompt
from dagster_project.core.shared.taxonomy import Subtype

# Everyday topics rotated across samples so one subtype does not produce n copies of one request.
TOPICS = (
    "travel", "cooking", "personal finance", "health and fitness", "software", "school homework",
    "shopping", "home repair", "music", "sports", "history", "job search", "gardening", "cars",
    "movies and TV", "pets", "science", "event planning",
)

GENERATION_SCHEMA = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 8, "maxLength": 200},
        "clarifying_question": {"type": "string", "minLength": 8, "maxLength": 200},
        "missing_info": {"type": "array", "items": {"type": "string", "maxLength": 40}, "minItems": 1, "maxItems": 4},
        "explanation": {"type": "string", "maxLength": 200},
    },
    "required": ["query", "clarifying_question", "missing_info", "explanation"],
}

RATING_SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 5},
                   "reason": {"type": "string", "maxLength": 160}},
    "required": ["score", "reason"],
}


def generation_plan(subtypes: list[Subtype], n_per_subtype: int) -> pl.DataFrame:
    """One row per query to generate: subtype, sample index and a topic hint."""
    return pl.DataFrame(
        [
            {"subtype": s.key, "sample": i, "topic_hint": TOPICS[(i + k * 5) % len(TOPICS)]}
            for k, s in enumerate(subtypes)
            for i in range(n_per_subtype)
        ],
        schema={"subtype": pl.Utf8, "sample": pl.Int64, "topic_hint": pl.Utf8},
    )


def generation_requests(plan: pl.DataFrame, subtypes: dict[str, Subtype], temperature: float,
                        seed: int = 0) -> list[ChatRequest]:
    prompt = load_prompt("generate_single_turn")
    reqs = []
    for row in plan.iter_rows(named=True):
        s = subtypes[row["subtype"]]
        msgs = prompt.messages(subtype_name=s.name.lower(), definition=s.definition, example=s.example,
                               example_clarification=s.example_clarification, topic_hint=row["topic_hint"])
        reqs.append(ChatRequest.of(msgs, prompt.version, GENERATION_SCHEMA, temperature=temperature,
                                   seed=seed + row["sample"], max_tokens=320))
    return reqs


def parse_generation(plan: pl.DataFrame, requests: list[ChatRequest], results: list[ChatResult]) -> pl.DataFrame:
    """One row per reply with status ok / parse_error / llm_error; raw output and prompt version kept."""
    rows = []
    for row, req, res in zip(plan.iter_rows(named=True), requests, results, strict=True):
        out = {**row, "query_id": f"{row['subtype']}-{row['sample']:03d}", "query": None,
               "clarifying_question": None, "missing_info": [], "explanation": None, "status": "ok",
               "error": None, "raw_output": res.text, "model": res.model, "prompt_version": req.prompt_version}
        if res.error:
            out.update(status="llm_error", error=res.error)
        else:
            obj, err = parse_json_object(res.text)
            err = err or require_fields(obj, {"query": str, "clarifying_question": str, "missing_info": list})
            if err:
                out.update(status="parse_error", error=err)
            else:
                out.update(query=obj["query"].strip(), clarifying_question=obj["clarifying_question"].strip(),
                           missing_info=[str(x).strip() for x in obj["missing_info"] if str(x).strip()],
                           explanation=str(obj.get("explanation", "")).strip() or None)
        rows.append(out)
    return pl.DataFrame(rows, schema_overrides={"missing_info": pl.List(pl.Utf8), "query": pl.Utf8,
                                                "clarifying_question": pl.Utf8, "explanation": pl.Utf8,
                                                "error": pl.Utf8, "raw_output": pl.Utf8})


def rating_requests(rows: pl.DataFrame, subtypes: dict[str, Subtype]) -> list[ChatRequest]:
    """Quality(q) of Eq. 7: a judge scores fluency, fit to the subtype and usefulness of the question."""
    prompt = load_prompt("rate_single_turn")
    return [
        ChatRequest.of(prompt.messages(subtype_name=subtypes[r["subtype"]].name, query=r["query"],
                                       definition=subtypes[r["subtype"]].definition,
                                       clarifying_question=r["clarifying_question"]),
                       prompt.version, RATING_SCHEMA, temperature=0.0, max_tokens=120)
        for r in rows.iter_rows(named=True)
    ]


def parse_ratings(results: list[ChatResult]) -> pl.DataFrame:
    """quality (1-5, null when unusable), quality_reason, quality_status, quality_raw."""
    out = []
    for res in results:
        obj, err = (None, res.error) if res.error else parse_json_object(res.text)
        if obj is not None:
            err = require_fields(obj, {"score": int})
        score = obj["score"] if obj is not None and err is None and 1 <= obj["score"] <= 5 else None
        if obj is not None and err is None and score is None:
            err = f"score {obj['score']} outside 1-5"
        out.append({"quality": score, "quality_reason": (obj or {}).get("reason") if score else None,
                    "quality_status": "llm_error" if res.error else ("parse_error" if err else "ok"),
                    "quality_raw": res.text})
    return pl.DataFrame(out, schema={"quality": pl.Int64, "quality_reason": pl.Utf8, "quality_status": pl.Utf8,
                                     "quality_raw": pl.Utf8})
