"""Answer-set evaluation (Tables 1 and 4): each subject model's turn 2 under the four systems, the simulated
users' replies to its clarifying questions, the answers after clarification, and answer-set F1.

phi(r): a response is a clarifying question when it starts with "Clarifying Question:" (§2.2). Scores follow the
paper's released metric code (metrics.paper_*): the gold set is qa_sets.gold_set (raw strings, no aliases), one
simulated user per gold string; direct systems by set precision / recall, clarify turns by the share of users
answered correctly for their own answer without a leak.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any, Literal

import polars as pl
from pydantic import Field

from dagster_project.config import DoubleTurnConfig
from dagster_project.core.double_turn.answers import (
    Answer,
    answer_of,
    answers_after,
    clarify_text,
)
from dagster_project.core.double_turn.candidates import Clarification
from dagster_project.core.double_turn.metrics import (
    paper_answer_set_f1,
    paper_clarify_f1,
    paper_top_k,
    paper_user_correct,
)
from dagster_project.core.double_turn.simulation import (
    EVAL_SIMULATE,
    simulate,
    simulation_fields,
)
from dagster_project.llm.protocol import parse_decision
from dagster_project.llm.task import (
    PROVENANCE_SCHEMA,
    Ask,
    Chat,
    LLMTask,
    NonEmpty,
    Outcome,
    Reply,
    Status,
    ask_all,
)


class Decision(Reply):
    """Clarify-or-Direct's JSON reply (subject_output = json): answer or clarify, and the text."""

    action: Literal["answer", "clarify"]
    text: NonEmpty = Field(json_schema_extra={"minLength": 1, "maxLength": 160})


_DIRECT = LLMTask("double_turn_subject_direct", role="subject")
SYSTEMS: dict[str, tuple[LLMTask[Any], str, type[Reply]]] = {  # system -> (step, inference, JSON reply)
    "direct_greedy": (_DIRECT, "greedy", Answer),
    "direct_sampled": (_DIRECT, "sampled", Answer),
    "clarify": (LLMTask("double_turn_subject_clarify", role="subject"), "greedy", Clarification),
    "clarify_or_direct": (LLMTask("double_turn_subject_decide", role="subject"), "greedy", Decision),
}
SYSTEM_LABELS = {"direct_greedy": "Direct-Ans (greedy)", "direct_sampled": "Direct-Ans (sampled)",
                 "clarify": "Clarify", "clarify_or_direct": "Clarify-or-Direct",
                 "random_baseline": "Random (DA% of Clarify-or-Direct)"}

_CLARIFY_RE = re.compile(r"^[\s\"'*_>#`]*(?:assistant\s*:\s*)?[\s\"'*_`]*clarifying\s+question\s*[:\-][\s*_`]*", re.I)
_ANSWER_PREFIX = re.compile(r"^\s*(?:the\s+(?:short\s+)?answer\s+is|(?:short\s+)?answer\s*:|a\s*:)\s*[:\-]?\s*", re.I)


def subject_task(system: str, output: str) -> LLMTask[Any]:
    """The turn-2 step of one system: free text (the paper's protocol) or schema-enforced JSON."""
    task, _, reply = SYSTEMS[system]
    return task.with_reply(reply) if output == "json" else task


def turn2_asks(queries: pl.DataFrame, cfg: DoubleTurnConfig) -> list[Ask]:
    """Turn-2 requests for one subject: the four systems of Table 1 for every query."""
    asks = []
    for q in queries.iter_rows(named=True):
        for system, (_, inference, _) in SYSTEMS.items():
            sampled = inference == "sampled"
            asks.append(subject_task(system, cfg.subject_output).ask(
                {"query_id": q["query_id"], "system": system}, {"question": q["question"]},
                temperature=cfg.sample_temperature if sampled else 0.0, seed=cfg.seed,
                n=cfg.n_direct_samples if sampled else 1, max_tokens=cfg.subject_max_tokens))
    return asks


def _protocol_text(system: str, value: Any) -> str:
    """A JSON reply as protocol text: the answer, or "Clarifying Question: ..." (kept if already prefixed)."""
    if isinstance(value, Answer):
        return value.answer
    text, action = (value.clarifying_question, "clarify") if isinstance(value, Clarification) \
        else (value.text, value.action)
    if action == "clarify" and text.strip() and not _CLARIFY_RE.match(text):
        return clarify_text(text)
    return text


def subject_reply_text(system: str, raw: str, output: str) -> str:
    """The reply as protocol text: free text as is; a JSON reply rendered by its system. Unusable JSON -> ""."""
    if output != "json":
        return raw
    parsed = subject_task(system, output).parse(raw)
    return _protocol_text(system, parsed.value) if parsed.status is Status.OK else ""


def _reply_text(o: Outcome[dict[str, Any], Any], output: str) -> str:
    if output != "json":
        return o.raw_output or ""
    return _protocol_text(o.item["system"], o.value) if o.ok else ""


def extract_short_answer(text: str | None) -> str | None:
    """The answer in a free-text reply: prefix ("The answer is", "Answer:") removed, first line, no
    surrounding quotes or final period. None when nothing is left."""
    line = next((ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()), "")
    line = _ANSWER_PREFIX.sub("", line).strip(" \"'*`").rstrip(".").strip(" \"'*`")
    return line or None


def parse_turn2(text: str | None) -> dict[str, Any]:
    """phi(r): a clarifying question when the reply starts with "Clarifying Question:" (case, spacing,
    markdown tolerant; "The clarifying question is" is accepted too). Otherwise a direct answer."""
    raw = (text or "").strip()
    m = _CLARIFY_RE.match(raw)
    if m:
        cq = raw[m.end():].strip()
    else:
        d = parse_decision(raw)
        cq = d.text if d.action == "clarify" else None
    if cq is not None:
        cq = next((ln.strip() for ln in cq.splitlines() if ln.strip()), "")
        return {"action": "clarify", "clarifying_question": cq or None, "answer": None,
                "status": _status(cq), "error": None if cq else "empty clarifying question"}
    ans = extract_short_answer(raw)
    return {"action": "answer", "clarifying_question": None, "answer": ans,
            "status": _status(ans), "error": None if ans else "empty reply"}


def _status(usable: Any) -> str:
    return (Status.OK if usable else Status.PARSE_ERROR).value


def turn2_episodes(qa: pl.DataFrame, subject: str, outcomes: list[list[Outcome[dict[str, Any], Any]]],
                   output: str) -> list[dict[str, Any]]:
    """Parse turn 2 of every (query, system) of one subject (the outcomes of its turn2_asks)."""
    qinfo = {q["query_id"]: q for q in qa.iter_rows(named=True)}
    episodes = []
    for outs in outcomes:
        first = outs[0]
        system, q = first.item["system"], qinfo[first.item["query_id"]]
        ep = {"subject": subject, "system": system, "query_id": q["query_id"], "question": q["question"],
              "is_ambiguous": q["is_ambiguous"], "n_gold": len(q["gold_set"]), "gold": q["gold_set"],
              "raw_outputs": [o.raw_output for o in outs], "raw_output": first.raw_output, "model": first.model,
              "prompt_version": first.prompt_version}
        if first.status is Status.LLM_ERROR:
            ep.update(action=None, clarifying_question=None, answers=[], status=Status.LLM_ERROR.value,
                      error=first.error)
        elif system == "direct_sampled":
            top = paper_top_k([extract_short_answer(_reply_text(o, output)) for o in outs], len(q["gold_set"]))
            usable = [t for t in top if t]
            ep.update(action="answer", clarifying_question=None, answers=top,
                      status=_status(usable), error=None if usable else "no usable sample")
        else:
            t2 = parse_turn2(_reply_text(first, output))
            ep.update(action=t2["action"], clarifying_question=t2["clarifying_question"],
                      answers=[t2["answer"]] if t2["action"] == "answer" else [], status=t2["status"],
                      error=t2["error"])
        episodes.append(ep)
    return episodes


def episode_user_items(episodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """(episode, user i) items for every clarify turn with a usable question: one user per gold string (the
    paper's users, no aliases)."""
    items = []
    for e, ep in enumerate(episodes):
        if ep["action"] == "clarify" and ep["clarifying_question"]:
            for i, gold in enumerate(ep["gold"]):
                items.append({"episode": e, "user_index": i, "subject": ep["subject"], "question": ep["question"],
                              "clarifying_question": ep["clarifying_question"], "expected_answer": gold,
                              "aliases": [gold]})
    return items


EVAL_SCHEMA = {
    "subject": pl.Utf8, "system": pl.Utf8, "query_id": pl.Utf8, "is_ambiguous": pl.Boolean, "n_gold": pl.Int64,
    "action": pl.Utf8, "turns": pl.Int64, "clarifying_question": pl.Utf8, "predictions": pl.List(pl.Utf8),
    "owners": pl.List(pl.Int64), "user_replies": pl.List(pl.Utf8), "abstain_reasons": pl.List(pl.Utf8),
    "precision": pl.Float64, "recall": pl.Float64, "f1": pl.Float64, "raw_outputs": pl.List(pl.Utf8),
    "final_raw_outputs": pl.List(pl.Utf8), **PROVENANCE_SCHEMA,
}
Finals = dict[tuple[int, int], Outcome[dict[str, Any], Answer]]


def _clarify_turn(row: dict[str, Any], ep: dict[str, Any], users: list[dict[str, Any]], finals: Finals,
                  e: int) -> dict[str, float | None]:
    """Fill a clarify episode's per-user columns; its score as the paper's ``eval_clarify`` counts it."""
    preds, owners, replies, reasons, raws = [], [], [], [], []
    failed = False
    for u in users:
        fin = finals.get((e, u["user_index"]))
        replies.append(u["reply"])
        reasons.append(u["abstain_reason"])
        owners.append(u["user_index"])
        failed |= u["status"] == Status.LLM_ERROR.value or (fin is not None and fin.status is Status.LLM_ERROR)
        preds.append(answer_of(fin) if fin is not None else None)
        raws.append(fin.raw_output if fin is not None else None)
    if not users:  # unusable clarifying question: every user is unserved
        preds, owners, replies = [None] * ep["n_gold"], list(range(ep["n_gold"])), [None] * ep["n_gold"]
    row.update(predictions=preds, owners=owners, user_replies=None if not users else replies,
               abstain_reasons=reasons or None, final_raw_outputs=raws or None)
    if failed and row["status"] == Status.OK.value:
        row.update(status=Status.LLM_ERROR.value, error="a user simulation or final answer failed")
    return paper_clarify_f1([paper_user_correct(p, ep["gold"][o], r, ep["clarifying_question"])
                             for p, o, r in zip(preds, owners, replies, strict=True)])


def score_episodes(episodes: list[dict[str, Any]], users: list[dict[str, Any]], finals: Finals) -> pl.DataFrame:
    """One row per (subject, system, query): the answer set R, F1 against the gold set, model turns.

    ``users`` are the simulated users of clarify turns (episode_user_items + simulation_fields); ``finals``
    the answer after each answering user's reply, by (episode, user). Direct systems: R as a set, any gold
    may be matched. Clarify turns: R = {y_hat_i}, each counted only when correct for its own user i.
    ``raw_output`` is the turn-2 reply (sample 0 for Direct-Ans sampled; every sample is in ``raw_outputs``,
    the user simulator's and final answerer's replies in ``user_replies`` / ``final_raw_outputs``).
    Direct-Ans (sampled)'s R holds the k most frequent normalised samples, as the paper scores them.
    """
    per_episode: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for u in users:
        per_episode[u["episode"]].append(u)
    rows = []
    for e, ep in enumerate(episodes):
        row = {k: ep[k] for k in ("subject", "system", "query_id", "is_ambiguous", "n_gold", "action",
                                  "clarifying_question", "raw_outputs", "raw_output", "model", "prompt_version",
                                  "status", "error")}
        row.update(owners=None, user_replies=None, abstain_reasons=None, final_raw_outputs=None,
                   turns=2 if ep["action"] == "clarify" else 1)
        if ep["action"] == "clarify":
            score = _clarify_turn(row, ep, per_episode.get(e, []), finals, e)
        else:
            row["predictions"] = ep["answers"] or [None]
            score = paper_answer_set_f1(row["predictions"], ep["gold"])
        if row["status"] == Status.LLM_ERROR.value:
            score = {"precision": None, "recall": None, "f1": None}
        rows.append(row | score)
    return pl.DataFrame(rows, schema=EVAL_SCHEMA).select(list(EVAL_SCHEMA))


def eval_subjects(cfg: DoubleTurnConfig, known: list[str]) -> list[str]:
    """double_turn.subjects (None = every llm.subjects); an unknown name is a params error."""
    subjects = cfg.subjects if cfg.subjects is not None else list(known)
    unknown = sorted(set(subjects) - set(known))
    if unknown:
        raise ValueError(f"double_turn.subjects: {unknown} not in llm.subjects {sorted(known)}")
    return subjects


def final_role(final_answerer: str, subject: str) -> str:
    """Who answers after the clarifying turn: the answerer role, or the subject model itself."""
    return "answerer" if final_answerer == "answerer" else f"subject:{subject}"


def answers_in_eval(user: dict[str, Any]) -> bool:
    """Whether a simulated user gets a final answer in the evaluation: every user who replied, a leaking or
    "none" reply included (the paper scores leaks by its own rule, metrics.paper_leak); not a user the simulator
    abstained for, nor a failed or unparsable simulation."""
    return bool(user["reply"]) and user["abstain_reason"] in (None, "leak", "no_reply")


def eval_interactions(chat: Chat, qa: pl.DataFrame, queries: pl.DataFrame, subjects: list[str],
                      cfg: DoubleTurnConfig) -> pl.DataFrame:
    """Every subject x system x eval query: turn 2, simulated users' replies, answers after clarifying, F1."""
    episodes: list[dict[str, Any]] = []
    for s in subjects:
        answers = ask_all(chat, f"subject:{s}", turn2_asks(queries, cfg))
        episodes += turn2_episodes(qa, s, [a.outcomes for a in answers], cfg.subject_output)
    users = [o.item | simulation_fields(o) for o in simulate(chat, episode_user_items(episodes), EVAL_SIMULATE)]
    answering = [u for u in users if answers_in_eval(u)]
    finals: Finals = {}
    for role in sorted({final_role(cfg.final_answerer, u["subject"]) for u in answering}):
        mine = [u for u in answering if final_role(cfg.final_answerer, u["subject"]) == role]
        for o in answers_after(chat, mine, cfg.answer_max_tokens, role):
            finals[(o.item["episode"], o.item["user_index"])] = o
    return score_episodes(episodes, users, finals)
