"""ClariLM §3.3.3-3.3.5 Optimal Facet Selection: CoTAP annotation, the three preference types, SFT/DPO data.

CoTAP: for each question q the reasoning role sees the candidate set C = {c_1..c_n} U {a} (clarifying
questions from CFD plus a direct answer) and writes a chain of thought t, then picks argmax_c P(c | t, q).
Preference types: Clarify > Answer (picked a question), Answer > Clarify (picked the answer), and
q1 > q2 (the picked question over another candidate). SFT uses (q, r+); DPO uses (q, r+, r-), both in
the conversational formats TRL reads as-is.
"""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any

import polars as pl
from pydantic import ConfigDict, WithJsonSchema

from dagster_project.config import AnnotationsConfig
from dagster_project.core.clarilm.split import train_only
from dagster_project.llm.task import Chat, LLMTask, NonEmpty, Reply, Status, text_field

PAIR_TYPES = ("clarify_over_answer", "answer_over_clarify", "better_question")
CANDIDATE = pl.Struct({"facet_id": pl.Utf8, "facet": pl.Utf8, "clarifying_question": pl.Utf8, "origin": pl.Utf8})
REASONING_CHARS = 600


class DirectAnswer(Reply):
    """The answerer's direct answer to a question the log holds no answer for."""

    answer: NonEmpty = text_field(400)


@cache
def cotap_reply(n_candidates: int, reasoning_chars: int = REASONING_CHARS) -> type[Reply]:
    """CoTAP's reply for n candidate questions: a chain of thought, then choice 0 (answer) .. n (ask c_n)."""
    choice_schema = {"type": "integer", "minimum": 0, "maximum": n_candidates}

    class CoTAPChoice(Reply):
        """The reasoner's chain of thought and pick."""

        model_config = ConfigDict(json_schema_extra=lambda schema, _: schema.update(
            required=["reasoning", "choice", "rationale"]))

        reasoning: NonEmpty = text_field(reasoning_chars)
        choice: Annotated[int, WithJsonSchema(choice_schema)]
        rationale: Annotated[Any, WithJsonSchema({"type": "string", "maxLength": 200})] = ""

    return CoTAPChoice


def _in_range(value: Any, item: dict[str, Any]) -> str | None:
    n = len(item["candidates"])
    return None if 0 <= value.choice <= n else f"choice {value.choice} outside 0..{n}"


ANSWER = LLMTask("clarilm_answer", role="answerer", reply=DirectAnswer, sampling={"temperature": 0.0})
COTAP = LLMTask("clarilm_cotap", role="reasoner", check=_in_range, sampling={"temperature": 0.0})


# --------------------------------------------------------------------------- inputs: C = {c_1..c_n} U {a}

def candidate_sets(questions: pl.DataFrame, facets: pl.DataFrame, max_candidates: int) -> pl.DataFrame:
    """One row per selected question with its kept facets (log-origin first, then by id), at most max_candidates."""
    kept = facets.filter(pl.col("kept")).with_columns(_o=pl.when(pl.col("origin") == "log").then(0).otherwise(1))
    grouped = kept.sort("question_id", "_o", "facet_id").group_by("question_id", maintain_order=True).agg(
        candidates=pl.struct("facet_id", "facet", "clarifying_question", "origin").head(max_candidates),
        n_available=pl.len())
    return questions.select("question_id", "question", "question_source", "log_answer", "split").join(
        grouped, on="question_id", how="left").with_columns(
        candidates=pl.col("candidates").fill_null(pl.lit([], pl.List(CANDIDATE))),
        n_available=pl.col("n_available").fill_null(0).cast(pl.Int64)).sort("question_id")


def attach_answers(chat: Chat, sets: pl.DataFrame, max_tokens: int) -> pl.DataFrame:
    """`answer` = the logged assistant answer when there is one, else the answerer's reply (answer_source,
    answer_status say which, and why an answer is missing)."""
    need = [r for r in sets.iter_rows(named=True) if not r["log_answer"]]
    got = {o.item["question_id"]: o for o in ANSWER.run(chat, need, lambda r: {"question": r["question"]},
                                                         lambda _: {"max_tokens": max_tokens})}
    version = ANSWER.version if need else None
    cols: dict[str, list[Any]] = {k: [] for k in ("answer", "answer_source", "answer_status", "answer_error",
                                                  "answer_raw_output")}
    for r in sets.iter_rows(named=True):
        o = got.get(r["question_id"])
        if o is None:  # the log holds the answer
            row = (r["log_answer"], "log", Status.OK.value, None, None)
        else:
            row = (o.value.answer.strip() if o.ok else None, "generated", o.status.value, o.error, o.raw_output)
        for col, value in zip(cols, row, strict=True):
            cols[col].append(value)
    return sets.with_columns(**{k: pl.Series(v, dtype=pl.Utf8) for k, v in cols.items()},
                             answer_prompt_version=pl.lit(version, pl.Utf8))


def _clip(text: str | None, n: int = 400) -> str:
    text = text or ""
    return text if len(text) <= n else text[:n] + " ..."


def options_block(answer: str | None, candidates: list[dict[str, Any]]) -> str:
    """0 = the direct answer; 1..n = the clarifying questions, each with its facet."""
    lines = [f'0. Answer directly: "{_clip(answer)}"' if answer else "0. Answer directly (no draft answer available)."]
    lines += [f'{i}. Ask: "{c["clarifying_question"]}" (about: {c["facet"]})' for i, c in enumerate(candidates, 1)]
    return "\n".join(lines)


COTAP_COLUMNS = {"decision": pl.Utf8, "choice": pl.Int64, "chosen_facet_id": pl.Utf8, "chosen_question": pl.Utf8,
                 "chosen_origin": pl.Utf8, "reasoning": pl.Utf8, "rationale": pl.Utf8, "status": pl.Utf8,
                 "error": pl.Utf8, "raw_output": pl.Utf8, "model": pl.Utf8, "prompt_version": pl.Utf8}
PICK = ("decision", "choice", "chosen_facet_id", "chosen_question", "chosen_origin", "reasoning", "rationale")


def cotap_fields(item: dict[str, Any], value: Any) -> dict[str, Any]:
    """A valid choice -> decision and the chosen candidate: 0 answers, 1..n asks candidate n.
    Choosing to answer without an answer text is a parse_error (the row keeps the reasoning)."""
    out = {"choice": value.choice, "reasoning": value.reasoning.strip(), "rationale": str(value.rationale).strip()}
    if value.choice == 0:
        if not item["answer"]:
            return out | {"status": Status.PARSE_ERROR.value,
                          "error": "chose to answer but no answer text is available"}
        return out | {"decision": "answer", "chosen_origin": "answer"}
    c = item["candidates"][value.choice - 1]
    return out | {"decision": "ask", "chosen_facet_id": c["facet_id"], "chosen_question": c["clarifying_question"],
                  "chosen_origin": c["origin"]}


def parse_cotap_one(raw: str | None, candidates: list[dict[str, Any]], has_answer: bool) -> dict[str, Any]:
    """One reply text -> the CoTAP columns (no provenance). Out-of-range or missing fields -> parse_error."""
    item = {"candidates": candidates, "answer": "answer" if has_answer else None}
    parsed = COTAP.with_reply(cotap_reply(len(candidates))).parse(raw, item)
    out = dict.fromkeys(PICK) | {"status": parsed.status.value, "error": parsed.error}
    return out | cotap_fields(item, parsed.value) if parsed.value is not None else out


def cotap(chat: Chat, sets: pl.DataFrame, max_tokens: int) -> pl.DataFrame:
    """The reasoner picks answer-or-ask-which per question; its reply schema bounds `choice` by the question's
    candidates, so questions are sent in one batch per candidate count."""
    rows = sets.to_dicts()
    by_id: dict[str, dict[str, Any]] = {}
    for n in sorted({len(r["candidates"]) for r in rows}):
        group = [r for r in rows if len(r["candidates"]) == n]
        for o in COTAP.with_reply(cotap_reply(n)).run(
                chat, group, lambda r: {"question": r["question"], "options": options_block(r["answer"],
                                                                                           r["candidates"])},
                lambda _: {"max_tokens": max_tokens}):
            by_id[o.item["question_id"]] = dict.fromkeys(PICK) | o.provenance() | (
                cotap_fields(o.item, o.value) if o.ok else {})
    return pl.concat([sets, pl.DataFrame([by_id[r["question_id"]] for r in rows], schema=COTAP_COLUMNS)],
                     how="horizontal")


def cotap_annotations(chat: Chat, questions: pl.DataFrame, facets: pl.DataFrame,
                      cfg: AnnotationsConfig) -> pl.DataFrame:
    """CoTAP over the selected questions: candidate sets, answers where the log has none, the reasoner's pick."""
    sets = candidate_sets(questions.filter(pl.col("selected")), facets, cfg.max_candidates)
    sets = attach_answers(chat, sets, cfg.answer_max_tokens)
    return cotap(chat, sets, cfg.reasoning_max_tokens)


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
    for r in cotap.filter(pl.col("status") == Status.OK).iter_rows(named=True):
        base = {"question_id": r["question_id"], "question": r["question"], "question_source": r["question_source"],
                "split": r["split"]}
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
              "split": pl.Utf8, "type": pl.Utf8, "chosen": pl.Utf8, "rejected": pl.Utf8, "chosen_kind": pl.Utf8,
              "rejected_kind": pl.Utf8, "chosen_origin": pl.Utf8, "rejected_origin": pl.Utf8,
              "chosen_facet_id": pl.Utf8, "rejected_facet_id": pl.Utf8}
    return pl.DataFrame(rows, schema=schema)


# --------------------------------------------------------------------------- SFT / DPO in TRL's conversational formats

MESSAGE = pl.Struct({"role": pl.Utf8, "content": pl.Utf8})


def _msgs(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"role": role, "content": content} for role, content in pairs if content]


def sft_rows(cotap: pl.DataFrame, system_prompt: str | None) -> pl.DataFrame:
    """(q, r+) as {"messages": [system, user, assistant]} (TRL SFTTrainer's conversational format); train split only."""
    rows = []
    for r in train_only(cotap).filter(pl.col("status") == Status.OK).iter_rows(named=True):
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
    """(q, r+, r-) as TRL's conversational preference format: prompt / chosen / rejected message lists; train
    split only."""
    rows = [{"id": p["pair_id"], "question_id": p["question_id"], "type": p["type"],
             "prompt": _msgs(("system", system_prompt or ""), ("user", p["question"])),
             "chosen": _msgs(("assistant", p["chosen"])), "rejected": _msgs(("assistant", p["rejected"]))}
            for p in train_only(pairs).iter_rows(named=True)]
    return pl.DataFrame(rows, schema={"id": pl.Utf8, "question_id": pl.Utf8, "type": pl.Utf8,
                                      "prompt": pl.List(MESSAGE), "chosen": pl.List(MESSAGE),
                                      "rejected": pl.List(MESSAGE)})


def held_out_rows(cotap: pl.DataFrame, system_prompt: str | None) -> pl.DataFrame:
    """The held-out test split with CoTAP's pick as reference: reference_action clarify / answer, the reference
    question, and the prompt in the SFT template (so a trained model is asked as it learned). Rows whose
    annotation failed stay, with their status and a null reference."""
    test = cotap.filter(pl.col("split") == "test")
    ok = pl.col("status") == Status.OK
    return test.select(
        "question_id", "question", "question_source", "split",
        pl.when(ok).then(pl.when(pl.col("decision") == "ask").then(pl.lit("clarify")).otherwise(pl.lit("answer")))
        .alias("reference_action"),
        pl.when(ok & (pl.col("decision") == "ask")).then(pl.col("chosen_question")).alias("reference_question"),
        pl.when(ok & (pl.col("decision") == "answer")).then(pl.col("answer")).alias("reference_answer"),
        pl.Series("messages", [_msgs(("system", system_prompt or ""), ("user", q)) for q in test["question"]],
                  dtype=pl.List(MESSAGE)),
        "status",
    )


TRL_SFT_COLUMNS = ("messages",)
TRL_DPO_COLUMNS = ("prompt", "chosen", "rejected")


def trl_export(df: pl.DataFrame, columns: tuple[str, ...]) -> pl.DataFrame:
    """Only the columns TRL reads (extra columns would reach the trainer's collator)."""
    return df.select(columns)
