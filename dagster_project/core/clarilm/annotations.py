"""ClariLM §3.3.3-3.3.5 Optimal Facet Selection: CoTAP annotation, the three preference types, SFT/DPO data.

CoTAP: for each question q the reasoning role sees the candidate set C = {c_1..c_n} U {a} (clarifying
questions from CFD plus a direct answer) and writes a chain of thought t, then picks argmax_c P(c | t, q).
Preference types: Clarify > Answer (picked a question), Answer > Clarify (picked the answer), and
q1 > q2 (the picked question over another candidate). SFT uses (q, r+); DPO uses (q, r+, r-), both in
the conversational formats TRL reads as-is.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from dagster_project.llm.chat import ChatRequest, ChatResult
from dagster_project.llm.parsing import parse_json_object, require_fields
from dagster_project.llm.prompts import load_prompt

ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string", "maxLength": 400}},
    "required": ["answer"],
}
PAIR_TYPES = ("clarify_over_answer", "answer_over_clarify", "better_question")
CANDIDATE = pl.Struct({"facet_id": pl.Utf8, "facet": pl.Utf8, "clarifying_question": pl.Utf8, "origin": pl.Utf8})


def cotap_schema(n_candidates: int, reasoning_chars: int = 600) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "reasoning": {"type": "string", "maxLength": reasoning_chars},
            "choice": {"type": "integer", "minimum": 0, "maximum": n_candidates},
            "rationale": {"type": "string", "maxLength": 200},
        },
        "required": ["reasoning", "choice", "rationale"],
    }


# --------------------------------------------------------------------------- inputs: C = {c_1..c_n} U {a}

def candidate_sets(questions: pl.DataFrame, facets: pl.DataFrame, max_candidates: int) -> pl.DataFrame:
    """One row per selected question with its kept facets (log-origin first, then by id), at most max_candidates."""
    kept = facets.filter(pl.col("kept")).with_columns(_o=pl.when(pl.col("origin") == "log").then(0).otherwise(1))
    grouped = kept.sort("question_id", "_o", "facet_id").group_by("question_id", maintain_order=True).agg(
        candidates=pl.struct("facet_id", "facet", "clarifying_question", "origin").head(max_candidates),
        n_available=pl.len())
    return questions.select("question_id", "question", "question_source", "log_answer").join(
        grouped, on="question_id", how="left").with_columns(
        candidates=pl.col("candidates").fill_null(pl.lit([], pl.List(CANDIDATE))),
        n_available=pl.col("n_available").fill_null(0).cast(pl.Int64)).sort("question_id")


def answer_requests(rows: pl.DataFrame, max_tokens: int) -> list[ChatRequest]:
    prompt = load_prompt("clarilm_answer")
    return [ChatRequest.of(prompt.messages(question=q), prompt.version, ANSWER_SCHEMA, temperature=0.0,
                           max_tokens=max_tokens) for q in rows["question"]]


def attach_answers(sets: pl.DataFrame, todo_ids: list[str], requests: list[ChatRequest],
                   results: list[ChatResult]) -> pl.DataFrame:
    """`answer` = the logged assistant answer when there is one, else the answerer's reply (answer_source,
    answer_status say which, and why an answer is missing)."""
    got: dict[str, tuple[str | None, str, str | None, str | None]] = {}
    for qid, res in zip(todo_ids, results, strict=True):
        if res.error:
            got[qid] = (None, "llm_error", res.error, None)
            continue
        obj, err = parse_json_object(res.text)
        err = err or require_fields(obj, {"answer": str})
        got[qid] = (None, "parse_error", err, res.text) if err else (obj["answer"].strip(), "ok", None, res.text)
    version = requests[0].prompt_version if requests else None
    answers, sources, statuses, errors, raws = [], [], [], [], []
    for r in sets.iter_rows(named=True):
        if r["log_answer"]:
            answers.append(r["log_answer"])
            sources.append("log")
            statuses.append("ok")
            errors.append(None)
            raws.append(None)
        else:
            a, st, err, raw = got.get(r["question_id"], (None, "llm_error", "no answer requested", None))
            answers.append(a)
            sources.append("generated")
            statuses.append(st)
            errors.append(err)
            raws.append(raw)
    return sets.with_columns(
        answer=pl.Series(answers, dtype=pl.Utf8), answer_source=pl.Series(sources, dtype=pl.Utf8),
        answer_status=pl.Series(statuses, dtype=pl.Utf8), answer_error=pl.Series(errors, dtype=pl.Utf8),
        answer_raw_output=pl.Series(raws, dtype=pl.Utf8), answer_prompt_version=pl.lit(version, pl.Utf8))


def _clip(text: str | None, n: int = 400) -> str:
    text = text or ""
    return text if len(text) <= n else text[:n] + " ..."


def options_block(answer: str | None, candidates: list[dict[str, Any]]) -> str:
    """0 = the direct answer; 1..n = the clarifying questions, each with its facet."""
    lines = [f'0. Answer directly: "{_clip(answer)}"' if answer else "0. Answer directly (no draft answer available)."]
    lines += [f'{i}. Ask: "{c["clarifying_question"]}" (about: {c["facet"]})' for i, c in enumerate(candidates, 1)]
    return "\n".join(lines)


def cotap_requests(sets: pl.DataFrame, max_tokens: int, reasoning_chars: int = 600) -> list[ChatRequest]:
    prompt = load_prompt("clarilm_cotap")
    return [ChatRequest.of(prompt.messages(question=r["question"], options=options_block(r["answer"], r["candidates"])),
                           prompt.version, cotap_schema(len(r["candidates"]), reasoning_chars), temperature=0.0,
                           max_tokens=max_tokens)
            for r in sets.iter_rows(named=True)]


COTAP_COLUMNS = {"decision": pl.Utf8, "choice": pl.Int64, "chosen_facet_id": pl.Utf8, "chosen_question": pl.Utf8,
                 "chosen_origin": pl.Utf8, "reasoning": pl.Utf8, "rationale": pl.Utf8, "status": pl.Utf8,
                 "error": pl.Utf8, "raw_output": pl.Utf8, "model": pl.Utf8, "prompt_version": pl.Utf8}


def parse_cotap_one(raw: str | None, candidates: list[dict[str, Any]], has_answer: bool) -> dict[str, Any]:
    """choice 0 -> answer; 1..n -> ask candidate n. Out-of-range or missing fields -> parse_error. Never raises."""
    out: dict[str, Any] = {k: None for k in COTAP_COLUMNS} | {"status": "ok"}
    obj, err = parse_json_object(raw)
    err = err or require_fields(obj, {"choice": int, "reasoning": str})
    if err:
        return out | {"status": "parse_error", "error": err}
    choice = obj["choice"]
    if not 0 <= choice <= len(candidates):
        return out | {"status": "parse_error", "error": f"choice {choice} outside 0..{len(candidates)}"}
    out |= {"choice": choice, "reasoning": obj["reasoning"].strip(), "rationale": str(obj.get("rationale", "")).strip()}
    if choice == 0:
        if not has_answer:
            return out | {"status": "parse_error", "error": "chose to answer but no answer text is available"}
        return out | {"decision": "answer", "chosen_origin": "answer"}
    c = candidates[choice - 1]
    return out | {"decision": "ask", "chosen_facet_id": c["facet_id"], "chosen_question": c["clarifying_question"],
                  "chosen_origin": c["origin"]}


def parse_cotap(sets: pl.DataFrame, requests: list[ChatRequest], results: list[ChatResult]) -> pl.DataFrame:
    rows = []
    for r, req, res in zip(sets.iter_rows(named=True), requests, results, strict=True):
        if res.error:
            parsed = {k: None for k in COTAP_COLUMNS} | {"status": "llm_error", "error": res.error}
        else:
            parsed = parse_cotap_one(res.text, r["candidates"], bool(r["answer"])) | {"raw_output": res.text}
        rows.append(parsed | {"model": res.model, "prompt_version": req.prompt_version})
    return pl.concat([sets, pl.DataFrame(rows, schema=COTAP_COLUMNS)], how="horizontal")


# --------------------------------------------------------------------------- preference pairs

def format_response(kind: str, text: str) -> str:
    """The training target: the 'Need clarification' part of the template T(q), then the question or answer."""
    return f"Need clarification: {'yes' if kind == 'clarify' else 'no'}\n{text.strip()}"


def preference_pairs(cotap: pl.DataFrame, max_question_pairs: int) -> pl.DataFrame:
    """(q, r+, r-) triples of the three types from usable CoTAP rows.

    ask    -> Clarify > Answer (picked question over the answer, when an answer text exists) and up to
              max_question_pairs q1 > q2 (picked question over other candidates);
    answer -> Answer > Clarify against up to max(1, max_question_pairs) candidate questions.
    A pair needs both texts: without an answer text only q1 > q2 pairs can be built.
    """
    rows = []
    for r in cotap.filter(pl.col("status") == "ok").iter_rows(named=True):
        base = {"question_id": r["question_id"], "question": r["question"], "question_source": r["question_source"]}
        others = [c for c in r["candidates"] if c["facet_id"] != r["chosen_facet_id"]]

        def add(kind: str, chosen: tuple, rejected: tuple, k: int) -> None:
            if chosen[1].strip() == rejected[1].strip():  # two facets phrased as the same question: no preference
                return
            rows.append(base | {
                "pair_id": f"{r['question_id']}:{kind}:{k}", "type": kind,
                "chosen": format_response(chosen[0], chosen[1]), "rejected": format_response(rejected[0], rejected[1]),
                "chosen_kind": chosen[0], "rejected_kind": rejected[0], "chosen_origin": chosen[2],
                "rejected_origin": rejected[2], "chosen_facet_id": chosen[3], "rejected_facet_id": rejected[3]})

        answer = ("answer", r["answer"], "answer", None)
        if r["decision"] == "ask":
            picked = ("clarify", r["chosen_question"], r["chosen_origin"], r["chosen_facet_id"])
            if r["answer"]:
                add("clarify_over_answer", picked, answer, 0)
            for k, c in enumerate(others[:max_question_pairs]):
                add("better_question", picked, ("clarify", c["clarifying_question"], c["origin"], c["facet_id"]), k)
        elif r["answer"]:
            for k, c in enumerate(others[:max(1, max_question_pairs)]):
                add("answer_over_clarify", answer, ("clarify", c["clarifying_question"], c["origin"], c["facet_id"]), k)
    schema = {"pair_id": pl.Utf8, "question_id": pl.Utf8, "question": pl.Utf8, "question_source": pl.Utf8,
              "type": pl.Utf8, "chosen": pl.Utf8, "rejected": pl.Utf8, "chosen_kind": pl.Utf8,
              "rejected_kind": pl.Utf8, "chosen_origin": pl.Utf8, "rejected_origin": pl.Utf8,
              "chosen_facet_id": pl.Utf8, "rejected_facet_id": pl.Utf8}
    return pl.DataFrame(rows, schema=schema)


# --------------------------------------------------------------------------- SFT / DPO in TRL's conversational formats

MESSAGE = pl.Struct({"role": pl.Utf8, "content": pl.Utf8})


def _msgs(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"role": role, "content": content} for role, content in pairs if content]


def sft_rows(cotap: pl.DataFrame, system_prompt: str | None) -> pl.DataFrame:
    """(q, r+) as {"messages": [system, user, assistant]} (TRL SFTTrainer's conversational format)."""
    rows = []
    for r in cotap.filter(pl.col("status") == "ok").iter_rows(named=True):
        text = r["chosen_question"] if r["decision"] == "ask" else r["answer"]
        if not text:
            continue
        target = format_response("clarify" if r["decision"] == "ask" else "answer", text)
        rows.append({"id": r["question_id"], "question_id": r["question_id"], "decision": r["decision"],
                     "target_origin": r["chosen_origin"], "question_source": r["question_source"],
                     "messages": _msgs(("system", system_prompt or ""), ("user", r["question"]),
                                       ("assistant", target))})
    return pl.DataFrame(rows, schema={"id": pl.Utf8, "question_id": pl.Utf8, "decision": pl.Utf8,
                                      "target_origin": pl.Utf8, "question_source": pl.Utf8,
                                      "messages": pl.List(MESSAGE)})


def dpo_rows(pairs: pl.DataFrame, system_prompt: str | None) -> pl.DataFrame:
    """(q, r+, r-) as TRL's conversational preference format: prompt / chosen / rejected message lists."""
    rows = [{"id": p["pair_id"], "question_id": p["question_id"], "type": p["type"],
             "prompt": _msgs(("system", system_prompt or ""), ("user", p["question"])),
             "chosen": _msgs(("assistant", p["chosen"])), "rejected": _msgs(("assistant", p["rejected"]))}
            for p in pairs.iter_rows(named=True)]
    return pl.DataFrame(rows, schema={"id": pl.Utf8, "question_id": pl.Utf8, "type": pl.Utf8,
                                      "prompt": pl.List(MESSAGE), "chosen": pl.List(MESSAGE),
                                      "rejected": pl.List(MESSAGE)})


TRL_SFT_COLUMNS = ("messages",)
TRL_DPO_COLUMNS = ("prompt", "chosen", "rejected")


def trl_export(df: pl.DataFrame, columns: tuple[str, ...]) -> pl.DataFrame:
    """Only the columns TRL reads (extra columns would reach the trainer's collator)."""
    return df.select(columns)
