"""§2.3 with Appendices D and E: the judge's enough-information labels (-> ARS per turn), the five quality ratings
of clarifying turns, and per conversation A, R and SDRS."""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import Annotated, Any

import polars as pl
from pydantic import WithJsonSchema

from dagster_project.config import IntentsConfig
from dagster_project.core.intents.catalog import Catalog, name_key, string_enum
from dagster_project.core.intents.metrics import QUALITY_SCALES, ambiguity_resolution_score, sdrs, turn_quality
from dagster_project.core.intents.simulation import SCORED_OUTCOMES, transcript
from dagster_project.llm.task import Chat, LLMTask, Outcome, Reply, Status

_QUALITY_KEYS = {"relevance": "relevance", "conciseness": "conciseness", "repetition": "repetition_avoidance",
                 "factuality": "factuality", "politeness": "politeness"}

JUDGE_INFO = LLMTask("intents_judge_info", role="judge", lenient=True, sampling={"temperature": 0.0})
JUDGE_QUALITY = LLMTask("intents_judge_quality", role="judge", lenient=True, sampling={"temperature": 0.0})


def read_judgments(items: list[Any], n: int) -> tuple[list[bool] | None, str | None]:
    """Exactly n labels, each "enough" / "not enough" (longer phrasings accepted), else (None, reason)."""
    if len(items) != n:
        return None, f"expected {n} judgments, got {len(items)}"
    out = []
    for item in items:
        key = name_key(str(item))
        if key.startswith("not enough"):
            out.append(False)
        elif key.startswith("enough"):
            out.append(True)
        else:
            return None, f"judgment {item!r} is neither 'enough' nor 'not enough'"
    return out, None


def read_ratings(items: list[Any], n: int) -> tuple[list[dict[str, float]] | None, str | None]:
    """Exactly n objects with the five Appendix E labels, mapped to their values; else (None, reason)."""
    if len(items) != n:
        return None, f"expected {n} ratings, got {len(items)}"
    out = []
    for item in items:
        if not isinstance(item, dict):
            return None, "a rating is not an object"
        vals = {}
        for key, name in _QUALITY_KEYS.items():
            label = " ".join(str(item.get(key, item.get(name, ""))).casefold().replace("_", " ").split())
            if label not in QUALITY_SCALES[name]:
                return None, f"{key}: {label!r} is not one of {list(QUALITY_SCALES[name])}"
            vals[name] = QUALITY_SCALES[name][label]
        out.append(vals)
    return out, None


@cache
def info_task(n: int) -> LLMTask:
    """Fig. 6 for a conversation with n user messages: one label per message."""
    schema = {"type": "array", "minItems": n, "maxItems": n, "items": string_enum(["enough", "not enough"])}

    class InfoJudgments(Reply):
        judgments: Annotated[list[Any], WithJsonSchema(schema)]

    return dataclasses.replace(JUDGE_INFO, reply=InfoJudgments, check=lambda v, _: read_judgments(v.judgments, n)[1],
                               sampling={**JUDGE_INFO.sampling, "max_tokens": 40 + 8 * n})


@cache
def quality_task(n: int) -> LLMTask:
    """Fig. 7 for n clarifying turns: the five ratings of each."""
    item = {"type": "object", "properties": {key: string_enum(list(QUALITY_SCALES[name]))
                                             for key, name in _QUALITY_KEYS.items()}, "required": list(_QUALITY_KEYS)}
    schema = {"type": "array", "minItems": n, "maxItems": n, "items": item}

    class QualityRatings(Reply):
        ratings: Annotated[list[Any], WithJsonSchema(schema)]

    return dataclasses.replace(JUDGE_QUALITY, reply=QualityRatings, check=lambda v, _: read_ratings(v.ratings, n)[1],
                               sampling={**JUDGE_QUALITY.sampling, "max_tokens": 60 + 90 * n})


def parse_info_judgments(raw: str | None, n: int) -> tuple[list[bool] | None, str | None]:
    """The enough-information judge's reply text -> (n labels, None) or (None, reason)."""
    p = info_task(n).parse(raw)
    return (read_judgments(p.value.judgments, n)[0], None) if p.status is Status.OK else (None, p.error)


def parse_quality_ratings(raw: str | None, n: int) -> tuple[list[dict[str, float]] | None, str | None]:
    """The quality judge's reply text -> (n rating dicts, None) or (None, reason)."""
    p = quality_task(n).parse(raw)
    return (read_ratings(p.value.ratings, n)[0], None) if p.status is Status.OK else (None, p.error)


SCORE_SCHEMA = {
    "conversation_id": pl.Utf8, "assistant_turn": pl.Int64, "kind": pl.Utf8, "split": pl.Utf8, "method": pl.Utf8,
    "query_id": pl.Utf8, "true_intent": pl.Utf8, "action": pl.Utf8, "predicted_intent": pl.Utf8, "text": pl.Utf8,
    "enough_info": pl.Boolean, "info_source": pl.Utf8, "ars": pl.Int64, "relevance": pl.Float64,
    "conciseness": pl.Float64, "repetition_avoidance": pl.Float64, "factuality": pl.Float64,
    "politeness": pl.Float64, "quality": pl.Float64, "outcome": pl.Utf8, "n_turns": pl.Int64, "A": pl.Float64,
    "R": pl.Float64, "sdrs": pl.Float64, "score_status": pl.Utf8, "score_error": pl.Utf8, "judge_calls": pl.Int64,
    "info_raw_output": pl.Utf8, "quality_raw_output": pl.Utf8, "judge_repaired": pl.Boolean, "model": pl.Utf8,
    "prompt_version": pl.Utf8,
}


def _conversations(turns: pl.DataFrame) -> list[dict[str, Any]]:
    convs = []
    for (cid,), t in turns.sort("message_index").group_by(["conversation_id"], maintain_order=True):
        history = [{"role": r["speaker"], "content": r["text"] or ""} for r in t.iter_rows(named=True)
                   if r["text"] is not None]
        convs.append({"cid": cid, "meta": t.row(0, named=True), "history": history,
                      "asst": t.filter(pl.col("speaker") == "assistant").sort("assistant_turn")})
    return convs


def _ask_judge(chat: Chat, role: str, jobs: list[tuple[str, LLMTask, dict[str, Any]]]) -> dict[str, Outcome]:
    """One batched call for (conversation id, task, template values) jobs -> the outcome per conversation."""
    if not jobs:
        return {}
    sent = [(cid, task, task.request(values)) for cid, task, values in jobs]
    results = chat(role, [req for _, _, req in sent])
    return {cid: task.outcomes(cid, req, res)[0] for (cid, task, req), res in zip(sent, results, strict=True)}


def _judge_jobs(convs: list[dict[str, Any]], intent_list: str, judge_unambiguous: bool) -> tuple[list, list]:
    info, quality = [], []
    for c in convs:
        if c["meta"]["outcome"] not in SCORED_OUTCOMES:
            continue
        clar = [r["assistant_turn"] for r in c["asst"].iter_rows(named=True) if r["action"] == "clarify"]
        c["clarifying"] = clar
        if c["meta"]["kind"] == "ambiguous" or clar or judge_unambiguous:
            n = len([m for m in c["history"] if m["role"] == "user"][:c["asst"].height])
            info.append((c["cid"], info_task(n), {
                "intent_list": intent_list, "transcript": transcript(c["history"]), "n": n}))
        if clar:
            quality.append((c["cid"], quality_task(len(clar)), {
                "intent_list": intent_list, "transcript": transcript(c["history"]),
                "turn_list": ", ".join(f"[assistant {k}]" for k in clar), "n": len(clar)}))
    return info, quality


def _score_rows(c: dict[str, Any], info: Outcome | None, qual: Outcome | None, alpha: float) -> list[dict[str, Any]]:
    meta, asst = c["meta"], c["asst"]
    n = asst.height
    status, error, used = Status.OK, None, [o for o in (info, qual) if o is not None]
    enough: list[bool | None] = [None] * n
    source = None
    if meta["outcome"] not in SCORED_OUTCOMES:
        status, error = "not_scored", f"conversation outcome {meta['outcome']}"
    elif info is not None:
        source = "judge"
        if info.status is Status.LLM_ERROR:
            status, error = "judge_llm_error", info.error
        elif not info.ok:
            status, error = "judge_parse_error", f"enough-information judgments: {info.error}"
        else:
            enough = list(read_judgments(info.value.judgments, n)[0])
    else:
        enough, source = [True] * n, "by_construction"
    ratings: dict[int, dict[str, float]] = {}
    if qual is not None:
        if qual.status is Status.LLM_ERROR:
            if status == Status.OK:
                status, error = "judge_llm_error", qual.error
        elif not qual.ok:
            if status == Status.OK:
                status, error = "judge_parse_error", f"quality ratings: {qual.error}"
        else:
            ratings = dict(zip(c["clarifying"], read_ratings(qual.value.ratings, len(c["clarifying"]))[0]))
    ars = [None if e is None else ambiguity_resolution_score(a, e) for a, e in zip(asst["action"].to_list(), enough)]
    qual_values = {k: turn_quality(v) for k, v in ratings.items()}
    conv = {"A": None, "R": None, "SDRS": None}
    if status != "not_scored":
        non_final = [qual_values.get(k) for k in asst["assistant_turn"].to_list()[:-1]]
        conv = sdrs(ars, non_final if n > 1 else None, meta["outcome"] == "correct", meta["outcome"] == "max_turns",
                    alpha)
    rows = []
    for i, r in enumerate(asst.iter_rows(named=True)):
        v = ratings.get(r["assistant_turn"], {})
        rows.append({
            "conversation_id": c["cid"], "assistant_turn": r["assistant_turn"], "kind": meta["kind"],
            "split": meta["split"], "method": meta["method"], "query_id": meta["query_id"],
            "true_intent": meta["true_intent"], "action": r["action"], "predicted_intent": r["predicted_intent"],
            "text": r["text"], "enough_info": enough[i], "info_source": source if enough[i] is not None else None,
            "ars": ars[i], **{k: v.get(k) for k in QUALITY_SCALES}, "quality": qual_values.get(r["assistant_turn"]),
            "outcome": meta["outcome"], "n_turns": n, "A": conv["A"], "R": conv["R"], "sdrs": conv["SDRS"],
            "score_status": status, "score_error": error, "judge_calls": len(used),
            "info_raw_output": info.raw_output if info else None,
            "quality_raw_output": qual.raw_output if qual else None,
            "judge_repaired": any(o.repaired for o in used) if used else None,
            "model": ",".join(sorted({o.model for o in used})) or None,
            "prompt_version": ",".join(o.prompt_version for o in used) or None,
        })
    return rows


def score_conversations(turns: pl.DataFrame, chat: Chat, catalog: Catalog, cfg: IntentsConfig,
                        judge_role: str = "judge") -> pl.DataFrame:
    """One row per assistant turn: ARS (Appendix D), the five ratings for clarifying turns (Appendix E), and the
    conversation's A, R and SDRS (§2.3, weight cfg.alpha) repeated on each of its turns.

    The judge decides, per user message, whether the user's messages so far are enough to tell the intent, from
    the conversation alone as in Fig. 6 (it never sees the query the user had in mind; one call per conversation),
    and rates every clarifying turn (one call per conversation with at least one, Fig. 7). Every ambiguous
    conversation and every conversation with a clarifying turn is judged; an unambiguous utterance the assistant
    answered directly carries enough information by construction unless cfg.judge_unambiguous. Conversations that failed for reasons outside the
    assistant (llm_error, user_error) are listed with score_status not_scored and no scores.
    """
    if turns.is_empty():
        return pl.DataFrame(schema=SCORE_SCHEMA)
    convs = _conversations(turns)
    info_jobs, quality_jobs = _judge_jobs(convs, catalog.render(examples_per_intent=0), cfg.judge_unambiguous)
    info = _ask_judge(chat, judge_role, info_jobs)
    quality = _ask_judge(chat, judge_role, quality_jobs)
    rows = [row for c in convs for row in _score_rows(c, info.get(c["cid"]), quality.get(c["cid"]), cfg.alpha)]
    return pl.DataFrame(rows, schema=SCORE_SCHEMA)


def conversation_table(scores: pl.DataFrame) -> pl.DataFrame:
    """One row per conversation: id, kind, outcome, turns, A, R, SDRS, score_status (from the per-turn scores)."""
    keep = ["conversation_id", "kind", "split", "method", "query_id", "true_intent", "outcome", "n_turns", "A", "R",
            "sdrs", "score_status"]
    return scores.group_by("conversation_id", maintain_order=True).agg(
        [pl.col(c).first() for c in keep[1:]]).select(keep)
