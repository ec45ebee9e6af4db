"""Double-turn preferences (Zhang, Knox & Choi): label clarify-or-answer responses by simulating each user's next turn.

Paper terms used throughout:
- query x with k users u_1..u_k, user i expecting answer y_i (one interpretation = one alias list);
- feasible answer sets Y_human (annotations) and Y_model (few-shot answerer samples, §4 SFT data);
- clarifying question q, the user's clarifying answer a_i = psi(x, q, y_i) (may abstain; a reply that
  contains y_i leaks it and counts as an abstain), the answer after clarification y_hat_i = M(x, q, a_i);
- double-turn score(q) = mean_i EM(y_hat_i, y_i); a direct answer y_hat is scored against every y_i;
  ties between a clarifying question and a direct answer go to the direct answer (§3.1);
- phi(r): a response is a clarifying question when it starts with "Clarifying Question:" (§2.2);
- answer-set F1 between R and {y_1..y_k}, the own-user rule for clarify systems, average turns,
  Direct-Answer accuracy and the random baseline at the same DA% (Tables 1 and 4).

Pure functions: requests in, rows out. No Dagster, no I/O, no model.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from itertools import combinations
from typing import Any

import polars as pl

from dagster_project.llm.chat import ChatRequest, ChatResult
from dagster_project.core.double_turn.metrics import answer_set_f1, direct_answer_accuracy, exact_match, normalize_answer, random_decision_baseline
from dagster_project.llm.parsing import parse_json_object, require_fields
from dagster_project.llm.protocol import parse_decision
from dagster_project.llm.prompts import load_prompt

CLARIFY_MARK = "Clarifying Question:"

ANSWER_SCHEMA = {"type": "object", "properties": {"answer": {"type": "string", "minLength": 1, "maxLength": 60}},
                 "required": ["answer"]}
CLARIFY_SCHEMA = {"type": "object",
                  "properties": {"clarifying_question": {"type": "string", "minLength": 5, "maxLength": 160}},
                  "required": ["clarifying_question"]}
USER_SCHEMA = {"type": "object",
               "properties": {"reply": {"type": "string", "maxLength": 150}, "abstain": {"type": "boolean"}},
               "required": ["reply", "abstain"]}
JUDGE_SCHEMA = {"type": "object",
                "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 10},
                               "reason": {"type": "string", "maxLength": 80}},
                "required": ["score", "reason"]}

MESSAGES = pl.List(pl.Struct({"role": pl.Utf8, "content": pl.Utf8}))
_PROVENANCE = {"status": pl.Utf8, "error": pl.Utf8, "raw_output": pl.Utf8, "model": pl.Utf8,
               "prompt_version": pl.Utf8}


def sft_schema(k: int) -> dict[str, Any]:
    """JSON schema for the SFT generator: one clarifying question and one user reply per feasible answer."""
    props: dict[str, Any] = {"clarifying_question": {"type": "string", "minLength": 5, "maxLength": 160}}
    for i in range(1, k + 1):
        props[f"reply_{i}"] = {"type": "string", "maxLength": 120}
    return {"type": "object", "properties": props, "required": list(props)}


def _status(res: ChatResult, err: str | None) -> str:
    return "llm_error" if res.error else ("parse_error" if err else "ok")


def _first(xs: list[str]) -> str:
    return xs[0] if xs else ""


# --------------------------------------------------------------------------- few-shot answers (Y_model, direct answers)

def shot_pool(qa: pl.DataFrame) -> list[tuple[str, str, str]]:
    """(query_id, question, first gold answer) for every imported query: the few-shot exemplars."""
    return [(r["query_id"], r["question"], r["gold_answers"][0]) for r in qa.iter_rows(named=True)]


def pick_shots(pool: list[tuple[str, str, str]], query_id: str, n: int, seed: int, round_: int) -> str:
    """A seeded sample of n exemplars (never the query itself), one sample per query and round."""
    others = [p for p in pool if p[0] != query_id]
    rng = random.Random(f"{seed}:{query_id}:{round_}")
    shots = rng.sample(others, min(n, len(others)))
    return "\n".join(f"Question: {q}\nAnswer: {a}" for _, q, a in shots) or "(no examples)"


def answer_request(question: str, examples: str, temperature: float, seed: int, n: int,
                   max_tokens: int) -> ChatRequest:
    prompt = load_prompt("double_turn_answer")
    return ChatRequest.of(prompt.messages(examples=examples, question=question), prompt.version, ANSWER_SCHEMA,
                          temperature=temperature, seed=seed, n=n, max_tokens=max_tokens)


def parse_answer(text: str, error: str | None = None) -> tuple[str | None, str, str | None]:
    """(answer, status, error) from a JSON {"answer": ...} reply; never raises."""
    if error:
        return None, "llm_error", error
    obj, err = parse_json_object(text)
    err = err or require_fields(obj, {"answer": str})
    if err:
        return None, "parse_error", err
    answer = re.sub(r"^\s*(?:the\s+answer\s+is|answer)\s*[:\-]?\s*", "", obj["answer"].strip(), flags=re.I).strip()
    return (answer, "ok", None) if answer else (None, "parse_error", "empty answer")


def feasible_answer_requests(queries: pl.DataFrame, pool: list[tuple[str, str, str]], rounds: int, n_shots: int,
                             temperature: float, seed: int, max_tokens: int) -> tuple[list[dict], list[ChatRequest]]:
    """Per query and round: a fresh few-shot prompt, one greedy answer (T=0) and one sample (T=temperature)."""
    plan, reqs = [], []
    for q in queries.iter_rows(named=True):
        for r in range(rounds):
            shots = pick_shots(pool, q["query_id"], n_shots, seed, r)
            for decoding, temp in (("greedy", 0.0), ("sampled", temperature)):
                plan.append({"query_id": q["query_id"], "round": r, "decoding": decoding})
                reqs.append(answer_request(q["question"], shots, temp, seed + r, 1, max_tokens))
    return plan, reqs


def dedup_answers(answers: list[str | None]) -> list[str]:
    """Distinct answers by SQuAD normalisation, first spelling and first-seen order kept; empties dropped."""
    out, seen = [], set()
    for a in answers:
        key = normalize_answer(a)
        if key and key not in seen:
            seen.add(key)
            out.append(a.strip())
    return out


def build_feasible_answers(queries: pl.DataFrame, plan: list[dict], requests: list[ChatRequest],
                           results: list[ChatResult], min_answers: int) -> pl.DataFrame:
    """One row per query: Y_human, Y_model (normalised dedup of all rounds) and the NQ-style filter.

    ``model_filter_passed`` is false when no model answer matches any gold alias (the paper drops such
    queries from the Y_model SFT set; here they stay, with ``filter_reason``). Every answerer reply is
    kept: ``raw_outputs`` (a list, in plan order) and ``raw_output`` (the same list as one JSON string). ``sft_human`` /
    ``sft_model`` say which feasible set is used for SFT data (ambiguous / at least ``min_answers`` answers).
    """
    by_query: dict[str, list[tuple[dict, ChatRequest, ChatResult]]] = {}
    for p, req, res in zip(plan, requests, results, strict=True):
        by_query.setdefault(p["query_id"], []).append((p, req, res))
    rows = []
    for q in queries.iter_rows(named=True):
        calls = by_query.get(q["query_id"], [])
        parsed = [parse_answer(res.text, res.error) for _, _, res in calls]
        y_model = dedup_answers([a for a, _, _ in parsed])
        matched = [any(exact_match(a, aliases) for aliases in q["answers"]) for a in y_model]
        passed = any(matched)
        statuses = [s for _, s, _ in parsed]
        status = "ok" if "ok" in statuses else (statuses[0] if statuses else "llm_error")
        errors = [e for _, _, e in parsed if e]
        rows.append({
            "query_id": q["query_id"], "question": q["question"], "is_ambiguous": q["is_ambiguous"],
            "y_human": q["gold_answers"], "y_human_aliases": q["answers"],
            "y_model": y_model, "y_model_matches_gold": matched, "n_model_answers": len(y_model),
            "model_filter_passed": passed,
            "filter_reason": None if passed else "no model answer matches any gold answer",
            "sft_human": bool(q["is_ambiguous"] and q["n_interpretations"] >= min_answers),
            "sft_model": bool(passed and len(y_model) >= min_answers),
            "n_calls": len(calls), "sample_statuses": statuses, "raw_outputs": [res.text for _, _, res in calls],
            "raw_output": json.dumps([res.text for _, _, res in calls], ensure_ascii=False) if calls else None,
            "status": status, "error": errors[0] if errors and status != "ok" else None,
            "model": calls[0][2].model if calls else None,
            "prompt_version": calls[0][1].prompt_version if calls else None,
        })
    return pl.DataFrame(rows, schema={
        "query_id": pl.Utf8, "question": pl.Utf8, "is_ambiguous": pl.Boolean, "y_human": pl.List(pl.Utf8),
        "y_human_aliases": pl.List(pl.List(pl.Utf8)), "y_model": pl.List(pl.Utf8),
        "y_model_matches_gold": pl.List(pl.Boolean), "n_model_answers": pl.Int64, "model_filter_passed": pl.Boolean,
        "filter_reason": pl.Utf8, "sft_human": pl.Boolean, "sft_model": pl.Boolean, "n_calls": pl.Int64,
        "sample_statuses": pl.List(pl.Utf8), "raw_outputs": pl.List(pl.Utf8), **_PROVENANCE})


# --------------------------------------------------------------------------- SFT data: (x, q) and (x, q, a_i, y_i)

def sft_requests(feasible: pl.DataFrame, max_tokens: int) -> tuple[list[dict], list[ChatRequest]]:
    """One generator request per (query, feasible-answer source) marked for SFT (human and/or model)."""
    prompt = load_prompt("double_turn_sft")
    plan, reqs = [], []
    for f in feasible.iter_rows(named=True):
        for source, answers, aliases in (("human", f["y_human"], f["y_human_aliases"]),
                                         ("model", f["y_model"], [[a] for a in f["y_model"]])):
            if not f[f"sft_{source}"]:
                continue
            listing = "\n".join(f"{i}. {a}" for i, a in enumerate(answers, start=1))
            fields = ", ".join(f'"reply_{i}"' for i in range(1, len(answers) + 1))
            plan.append({"query_id": f["query_id"], "question": f["question"], "answer_source": source,
                         "answers": answers, "aliases": aliases})
            reqs.append(ChatRequest.of(prompt.messages(question=f["question"], answer_list=listing,
                                                       reply_fields=fields),
                                       prompt.version, sft_schema(len(answers)), temperature=0.0,
                                       max_tokens=max_tokens))
    return plan, reqs


_NONE_REPLY = {"", "none", "n/a", "na", "no reply", "no answer"}


def _spaced(text: str | None) -> str:
    """normalize_answer after turning punctuation into spaces ("Cameron's" -> "cameron s", "1990-91" -> "1990 91")."""
    return normalize_answer(re.sub(r"[^\w\s]", " ", text or ""))


def leaks_answer(reply: str | None, aliases: list[str]) -> bool:
    """True when an alias of the user's answer appears, as whole words, in the reply.

    Both sides are compared under SQuAD normalisation and under a variant where punctuation separates
    words, so "James Cameron's film" and "the Nile-based one" leak "James Cameron" / "Nile" while
    "1950" does not leak "5".
    """
    texts = (f" {normalize_answer(reply)} ", f" {_spaced(reply)} ")
    keys = {k for a in aliases for k in (normalize_answer(a), _spaced(a)) if k}
    return any(f" {k} " in t for k in keys for t in texts)


def build_clarify_sft(plan: list[dict], requests: list[ChatRequest], results: list[ChatResult]) -> pl.DataFrame:
    """Rows (x, q) [row_type clarify] and (x, q, a_i, y_i) [row_type answer]: 1 + k rows per generator call.

    Answer rows are kept only with a usable reply: not "none", and not leaking y_i (reason otherwise).
    """
    rows = []
    for p, req, res in zip(plan, requests, results, strict=True):
        obj, err = (None, res.error) if res.error else parse_json_object(res.text)
        if obj is not None:
            err = require_fields(obj, {"clarifying_question": str})
        status = _status(res, err)
        cq = obj["clarifying_question"].strip() if status == "ok" else None
        base = {"query_id": p["query_id"], "question": p["question"], "answer_source": p["answer_source"],
                "clarifying_question": cq, "status": status, "error": err, "raw_output": res.text,
                "model": res.model, "prompt_version": req.prompt_version}
        sid = f"{p['query_id']}:{p['answer_source']}"
        rows.append({**base, "sft_id": sid, "row_type": "clarify", "answer_index": None, "expected_answer": None,
                     "user_reply": None, "kept": status == "ok", "reason": None if status == "ok" else status})
        for i, (answer, aliases) in enumerate(zip(p["answers"], p["aliases"], strict=True)):
            reply = obj.get(f"reply_{i + 1}") if status == "ok" else None
            reply = reply.strip() if isinstance(reply, str) else None
            if status != "ok":
                reason = f"generator reply unusable ({status})"
            elif reply is None or normalize_answer(reply) in _NONE_REPLY:
                reason = "no clarifying answer"
            elif leaks_answer(reply, aliases):
                reason = "reply leaks the answer"
            else:
                reason = None
            rows.append({**base, "sft_id": f"{sid}:{i}", "row_type": "answer", "answer_index": i,
                         "expected_answer": answer, "user_reply": reply, "kept": reason is None, "reason": reason})
    cols = ["sft_id", "query_id", "question", "answer_source", "row_type", "answer_index", "expected_answer",
            "clarifying_question", "user_reply", "kept", "reason", *_PROVENANCE]
    return pl.DataFrame(rows, schema={
        "sft_id": pl.Utf8, "query_id": pl.Utf8, "question": pl.Utf8, "answer_source": pl.Utf8, "row_type": pl.Utf8,
        "answer_index": pl.Int64, "expected_answer": pl.Utf8, "clarifying_question": pl.Utf8,
        "user_reply": pl.Utf8, "kept": pl.Boolean, "reason": pl.Utf8, **_PROVENANCE}).select(cols)


def clarify_text(question: str) -> str:
    """A clarifying response as the model should write it (phi checks this prefix)."""
    return f"{CLARIFY_MARK} {question.strip()}"


def _msg(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


def sft_exports(sft: pl.DataFrame) -> dict[str, list[dict[str, Any]]]:
    """TRL conversational ``messages`` datasets built from clarify_sft.

    clarify_sft: x -> q (Clarify SFT); answer_after_clarify_sft: (x, q, a_i) -> y_i (the Turn-4 model);
    direct_answer_sft: x -> y_i for every feasible answer (Direct-Ans SFT); sft_dataset: the union of
    clarify and direct examples (the Clarify-or-Direct-Ans SFT set); user_simulator_sft: (x, q, y_i) -> a_i
    (the paper's User-simulator SFT, §4 and Appendix A.1), see :func:`user_simulator_sft`.
    """
    kept = sft.filter(pl.col("kept"))
    clar = [{"messages": [_msg("user", r["question"]), _msg("assistant", clarify_text(r["clarifying_question"]))]}
            for r in kept.filter(pl.col("row_type") == "clarify").iter_rows(named=True)]
    after = [{"messages": [_msg("user", r["question"]), _msg("assistant", clarify_text(r["clarifying_question"])),
                           _msg("user", r["user_reply"]), _msg("assistant", r["expected_answer"])]}
             for r in kept.filter(pl.col("row_type") == "answer").iter_rows(named=True)]
    direct, seen = [], set()
    for r in sft.filter(pl.col("row_type") == "answer").iter_rows(named=True):
        key = (r["question"], normalize_answer(r["expected_answer"]))
        if key not in seen:
            seen.add(key)
            direct.append({"messages": [_msg("user", r["question"]), _msg("assistant", r["expected_answer"])]})
    return {"clarify_sft": clar, "answer_after_clarify_sft": after, "direct_answer_sft": direct,
            "sft_dataset": clar + direct, "user_simulator_sft": user_simulator_sft(sft)}


def user_simulator_sft(sft: pl.DataFrame) -> list[dict[str, Any]]:
    """(x, q, y_i) -> a_i examples for fine-tuning a model to serve as the `user_simulator` role.

    The prompt is the one the role is called with (double_turn_user.txt) and the target is the JSON the
    role must return, so a model trained on this file can be put in the role unchanged. A usable reply
    gives ``{"reply": a_i, "abstain": false}``; a generator "none" (no clarifying answer points to y_i)
    gives ``{"reply": "", "abstain": true}``. Leaking replies and rows of unusable generator calls are left
    out: they would teach the simulator to give the answer away.
    """
    prompt = load_prompt("double_turn_user")
    out = []
    for r in sft.filter((pl.col("row_type") == "answer") & (pl.col("status") == "ok")).iter_rows(named=True):
        if r["reason"] is None:
            target = {"reply": r["user_reply"], "abstain": False}
        elif r["reason"] == "no clarifying answer":
            target = {"reply": "", "abstain": True}
        else:
            continue
        msgs = prompt.messages(question=r["question"], clarifying_question=r["clarifying_question"],
                               expected_answer=r["expected_answer"])
        out.append({"messages": [*msgs, _msg("assistant", json.dumps(target, ensure_ascii=False))]})
    return out


# --------------------------------------------------------------------------- candidate responses

def candidate_requests(queries: pl.DataFrame, pool: list[tuple[str, str, str]], *, n_clarify_sampled: int,
                       clarify_temperature: float, n_direct_samples: int, sample_temperature: float,
                       n_shots: int, seed: int, max_tokens: int
                       ) -> tuple[list[dict], list[ChatRequest], list[dict], list[ChatRequest]]:
    """Clarifier: 1 greedy + n sampled clarifying questions; answerer: the greedy direct answer and n samples.

    The direct-answer requests repeat feasible_answers' round-0 prompt, so the LLM cache serves them.
    """
    prompt = load_prompt("double_turn_clarify")
    c_plan, c_reqs, d_plan, d_reqs = [], [], [], []
    for q in queries.iter_rows(named=True):
        msgs = prompt.messages(question=q["question"])
        c_plan.append({"query_id": q["query_id"], "decoding": "greedy"})
        c_reqs.append(ChatRequest.of(msgs, prompt.version, CLARIFY_SCHEMA, temperature=0.0, seed=seed,
                                     max_tokens=80))
        if n_clarify_sampled > 0:
            c_plan.append({"query_id": q["query_id"], "decoding": "sampled"})
            c_reqs.append(ChatRequest.of(msgs, prompt.version, CLARIFY_SCHEMA, temperature=clarify_temperature,
                                         seed=seed, n=n_clarify_sampled, max_tokens=80))
        shots = pick_shots(pool, q["query_id"], n_shots, seed, 0)
        d_plan.append({"query_id": q["query_id"], "decoding": "greedy"})
        d_reqs.append(answer_request(q["question"], shots, 0.0, seed, 1, max_tokens))
        d_plan.append({"query_id": q["query_id"], "decoding": "sampled"})
        d_reqs.append(answer_request(q["question"], shots, sample_temperature, seed, n_direct_samples, max_tokens))
    return c_plan, c_reqs, d_plan, d_reqs


def top_k_answers(answers: list[str | None], k: int) -> list[str]:
    """The k most frequent answers by normalised form (ties: first seen first); fewer if fewer distinct."""
    keyed = [(normalize_answer(a), a) for a in answers if a is not None and normalize_answer(a)]
    counts = Counter(k_ for k_, _ in keyed)
    first: dict[str, tuple[int, str]] = {}
    for i, (key, a) in enumerate(keyed):
        first.setdefault(key, (i, a.strip()))
    order = sorted(counts, key=lambda key: (-counts[key], first[key][0]))
    return [first[key][1] for key in order[:k]]


CANDIDATE_SCHEMA = {
    "candidate_id": pl.Utf8, "query_id": pl.Utf8, "question": pl.Utf8, "kind": pl.Utf8, "decoding": pl.Utf8,
    "sample_index": pl.Int64, "clarifying_question": pl.Utf8, "answer": pl.Utf8, "text": pl.Utf8,
    "in_pairs": pl.Boolean, "reason": pl.Utf8, "in_topk": pl.Boolean, **_PROVENANCE,
}


def build_candidates(queries: pl.DataFrame, c_plan: list[dict], c_reqs: list[ChatRequest],
                     c_res: list[ChatResult], d_plan: list[dict], d_reqs: list[ChatRequest],
                     d_res: list[ChatResult]) -> pl.DataFrame:
    """One row per candidate: clarifying questions (c0 greedy, c1.. sampled), the direct answer (d) and
    the Direct-Ans sampled pool (s0..; ``in_topk`` marks the top-k most frequent, k = number of gold answers).

    ``in_pairs`` says whether a candidate enters the preference pairs; otherwise ``reason`` says why
    (unusable reply, duplicate question, or sampled-pool member).
    """
    qinfo = {q["query_id"]: q for q in queries.iter_rows(named=True)}
    rows: dict[str, list[dict]] = {qid: [] for qid in qinfo}
    for p, req, res in zip(c_plan, c_reqs, c_res, strict=True):
        q = qinfo[p["query_id"]]
        start = 0 if p["decoding"] == "greedy" else 1
        texts = res.texts or [""]
        for j, text in enumerate(texts if p["decoding"] == "sampled" else texts[:1]):
            obj, err = (None, res.error) if res.error else parse_json_object(text)
            if obj is not None:
                err = require_fields(obj, {"clarifying_question": str})
            status = _status(res, err)
            cq = obj["clarifying_question"].strip() if status == "ok" else None
            rows[q["query_id"]].append({
                "candidate_id": f"{q['query_id']}:c{start + j}", "query_id": q["query_id"], "question": q["question"],
                "kind": "clarify", "decoding": p["decoding"], "sample_index": j, "clarifying_question": cq,
                "answer": None, "text": clarify_text(cq) if cq else None, "in_pairs": status == "ok",
                "reason": None if status == "ok" else status, "in_topk": None, "status": status, "error": err,
                "raw_output": text, "model": res.model, "prompt_version": req.prompt_version})
    for p, req, res in zip(d_plan, d_reqs, d_res, strict=True):
        q = qinfo[p["query_id"]]
        if p["decoding"] == "greedy":
            ans, status, err = parse_answer(res.text, res.error)
            rows[q["query_id"]].append({
                "candidate_id": f"{q['query_id']}:d", "query_id": q["query_id"], "question": q["question"],
                "kind": "direct", "decoding": "greedy", "sample_index": 0, "clarifying_question": None,
                "answer": ans, "text": ans, "in_pairs": status == "ok", "reason": None if status == "ok" else status,
                "in_topk": None, "status": status, "error": err, "raw_output": res.text, "model": res.model,
                "prompt_version": req.prompt_version})
            continue
        texts = res.texts or [""]
        parsed = [parse_answer(t, res.error) for t in texts]
        top = {normalize_answer(a) for a in top_k_answers([a for a, _, _ in parsed], q["n_interpretations"])}
        marked: set[str] = set()
        for j, (text, (ans, status, err)) in enumerate(zip(texts, parsed)):
            key = normalize_answer(ans) if ans else None
            in_top = bool(key) and key in top and key not in marked
            if in_top:
                marked.add(key)
            rows[q["query_id"]].append({
                "candidate_id": f"{q['query_id']}:s{j}", "query_id": q["query_id"], "question": q["question"],
                "kind": "direct_sample", "decoding": "sampled", "sample_index": j, "clarifying_question": None,
                "answer": ans, "text": ans, "in_pairs": False, "reason": "Direct-Ans sampled pool",
                "in_topk": in_top, "status": status, "error": err, "raw_output": text, "model": res.model,
                "prompt_version": req.prompt_version})
    out = []
    for qid in qinfo:
        seen: dict[str, str] = {}
        for r in rows[qid]:
            if r["kind"] == "clarify" and r["in_pairs"]:
                key = normalize_answer(r["clarifying_question"])
                if key in seen:
                    r.update(in_pairs=False, reason=f"duplicate of {seen[key]}")
                else:
                    seen[key] = r["candidate_id"]
            out.append(r)
    return pl.DataFrame(out, schema=CANDIDATE_SCHEMA)


# --------------------------------------------------------------------------- user simulation psi(x, q, y_i) -> a_i

def simulation_requests(items: list[dict], max_tokens: int = 80) -> list[ChatRequest]:
    """One user_simulator request per item {question, clarifying_question, expected_answer}."""
    prompt = load_prompt("double_turn_user")
    return [ChatRequest.of(prompt.messages(question=it["question"], clarifying_question=it["clarifying_question"],
                                           expected_answer=it["expected_answer"]),
                           prompt.version, USER_SCHEMA, temperature=0.0, max_tokens=max_tokens)
            for it in items]


def parse_simulation(res: ChatResult, aliases: list[str]) -> dict[str, Any]:
    """reply, abstained, abstain_reason (simulator_abstained / no_reply / leak / parse_error / llm_error), status.

    A reply that contains the user's expected answer (any alias, normalised) leaks it and is treated as
    an abstain, as in the paper; the reply is kept for inspection.
    """
    if res.error:
        return {"reply": None, "abstained": True, "abstain_reason": "llm_error", "status": "llm_error",
                "error": res.error}
    obj, err = parse_json_object(res.text)
    if obj is not None and obj.get("abstain") is True:  # an explicit abstain needs no reply
        reply = obj.get("reply") if isinstance(obj.get("reply"), str) else ""
        return {"reply": reply.strip() or None, "abstained": True, "abstain_reason": "simulator_abstained",
                "status": "ok", "error": None}
    if obj is not None:
        err = require_fields(obj, {"reply": str}) if "reply" in obj else "missing field 'reply'"
    if err:
        return {"reply": None, "abstained": True, "abstain_reason": "parse_error", "status": "parse_error",
                "error": err}
    reply = obj["reply"].strip()
    if obj.get("abstain") is True:
        reason = "simulator_abstained"
    elif normalize_answer(reply) in _NONE_REPLY:
        reason = "no_reply"
    elif leaks_answer(reply, aliases):
        reason = "leak"
    else:
        reason = None
    return {"reply": reply, "abstained": reason is not None, "abstain_reason": reason, "status": "ok", "error": None}


def user_items(candidates: pl.DataFrame, qa: pl.DataFrame) -> list[dict]:
    """Every (clarifying candidate in the pairs, user i) with the user's expected answer and aliases."""
    qinfo = {q["query_id"]: q for q in qa.iter_rows(named=True)}
    items = []
    for c in candidates.filter((pl.col("kind") == "clarify") & pl.col("in_pairs")).iter_rows(named=True):
        q = qinfo[c["query_id"]]
        for i, (gold, aliases) in enumerate(zip(q["gold_answers"], q["answers"], strict=True)):
            items.append({"sim_id": f"{c['candidate_id']}:u{i}", "candidate_id": c["candidate_id"],
                          "query_id": c["query_id"], "user_index": i, "question": q["question"],
                          "clarifying_question": c["clarifying_question"], "expected_answer": gold,
                          "aliases": aliases})
    return items


SIMULATION_SCHEMA = {
    "sim_id": pl.Utf8, "candidate_id": pl.Utf8, "query_id": pl.Utf8, "user_index": pl.Int64,
    "expected_answer": pl.Utf8, "clarifying_question": pl.Utf8, "reply": pl.Utf8, "abstained": pl.Boolean,
    "abstain_reason": pl.Utf8, **_PROVENANCE,
}


def build_simulations(items: list[dict], requests: list[ChatRequest], results: list[ChatResult]) -> pl.DataFrame:
    rows = []
    for it, req, res in zip(items, requests, results, strict=True):
        sim = parse_simulation(res, it["aliases"])
        rows.append({k: it[k] for k in ("sim_id", "candidate_id", "query_id", "user_index", "expected_answer",
                                        "clarifying_question")}
                    | sim | {"raw_output": res.text, "model": res.model, "prompt_version": req.prompt_version})
    return pl.DataFrame(rows, schema=SIMULATION_SCHEMA)


# --------------------------------------------------------------------------- answers after clarification, scores

def final_answer_requests(items: list[dict], max_tokens: int) -> list[ChatRequest]:
    """(x, q, a_i) -> y_hat_i for items {question, clarifying_question, reply}."""
    prompt = load_prompt("double_turn_answer_after")
    return [ChatRequest.of(prompt.messages(question=it["question"], clarifying_question=it["clarifying_question"],
                                           reply=it["reply"]),
                           prompt.version, ANSWER_SCHEMA, temperature=0.0, max_tokens=max_tokens)
            for it in items]


OUTCOME_SCHEMA = {
    "outcome_id": pl.Utf8, "candidate_id": pl.Utf8, "query_id": pl.Utf8, "kind": pl.Utf8, "user_index": pl.Int64,
    "expected_answer": pl.Utf8, "user_reply": pl.Utf8, "outcome": pl.Utf8, "prediction": pl.Utf8, "em": pl.Float64,
    "candidate_score": pl.Float64, "scored": pl.Boolean, **_PROVENANCE,
}


def build_outcomes(qa: pl.DataFrame, candidates: pl.DataFrame, sims: pl.DataFrame, final_items: list[dict],
                   final_reqs: list[ChatRequest], final_res: list[ChatResult]) -> pl.DataFrame:
    """One row per (candidate in the pairs, user): EM of the final answer against that user's y_i.

    Clarifying candidates: the answerer's answer after the user's reply (an abstained user scores 0, no
    call). Direct answers: the same answer is scored against every user. candidate_score = mean EM over
    the query's users; ``scored`` is false when an LLM call failed for one of its users (then it is
    left out of the pairs rather than counted wrong).
    """
    qinfo = {q["query_id"]: q for q in qa.iter_rows(named=True)}
    finals = {it["sim_id"]: (req, res) for it, req, res in zip(final_items, final_reqs, final_res, strict=True)}
    sim_rows = {s["sim_id"]: s for s in sims.iter_rows(named=True)}
    rows = []
    for c in candidates.filter(pl.col("in_pairs")).iter_rows(named=True):
        q = qinfo[c["query_id"]]
        for i, (gold, aliases) in enumerate(zip(q["gold_answers"], q["answers"], strict=True)):
            row = {"outcome_id": f"{c['candidate_id']}:u{i}", "candidate_id": c["candidate_id"],
                   "query_id": c["query_id"], "kind": c["kind"], "user_index": i, "expected_answer": gold,
                   "user_reply": None, "prediction": None, "error": None, "raw_output": None, "model": None,
                   "prompt_version": None}
            if c["kind"] == "direct":
                pred = c["answer"]
                row.update(outcome="direct", prediction=pred, status="ok", model=c["model"],
                           prompt_version=c["prompt_version"], raw_output=c["raw_output"])
            else:
                sim = sim_rows.get(row["outcome_id"])
                if sim is None or sim["abstained"]:
                    reason = sim["abstain_reason"] if sim else "not simulated"
                    row.update(outcome="failed" if reason == "llm_error" else "abstained",
                               user_reply=sim["reply"] if sim else None,
                               status="llm_error" if reason == "llm_error" else "abstained",
                               error=f"user {reason}")
                else:
                    req, res = finals[row["outcome_id"]]
                    pred, status, err = parse_answer(res.text, res.error)
                    row.update(outcome="failed" if status == "llm_error" else "answered", user_reply=sim["reply"],
                               prediction=pred, status=status, error=err, raw_output=res.text, model=res.model,
                               prompt_version=req.prompt_version)
            row["em"] = 1.0 if row["prediction"] is not None and exact_match(row["prediction"], aliases) else 0.0
            rows.append(row)
    df = pl.DataFrame(rows, schema={k: v for k, v in OUTCOME_SCHEMA.items()
                                    if k not in ("candidate_score", "scored")})
    df = df.with_columns(
        candidate_score=pl.col("em").mean().over("candidate_id"),
        scored=~(pl.col("outcome") == "failed").any().over("candidate_id"),
    )
    return df.select(list(OUTCOME_SCHEMA))


# --------------------------------------------------------------------------- single-turn judgements (standard scheme)

def judge_requests(candidates: pl.DataFrame) -> list[ChatRequest]:
    """The judge sees only the query and one response (no simulated future turn)."""
    prompt = load_prompt("double_turn_judge")
    return [ChatRequest.of(prompt.messages(question=c["question"], response=c["text"]), prompt.version,
                           JUDGE_SCHEMA, temperature=0.0, max_tokens=60)
            for c in candidates.iter_rows(named=True)]


def build_single_turn_scores(candidates: pl.DataFrame, requests: list[ChatRequest],
                             results: list[ChatResult]) -> pl.DataFrame:
    rows = []
    for c, req, res in zip(candidates.iter_rows(named=True), requests, results, strict=True):
        obj, err = (None, res.error) if res.error else parse_json_object(res.text)
        if obj is not None:
            err = require_fields(obj, {"score": int})
            if err is None and not 1 <= obj["score"] <= 10:
                err = f"score {obj['score']} outside 1-10"
        status = _status(res, err)
        rows.append({"candidate_id": c["candidate_id"], "query_id": c["query_id"], "kind": c["kind"],
                     "text": c["text"], "judge_score": float(obj["score"]) if status == "ok" else None,
                     "judge_reason": str(obj.get("reason", "")) if status == "ok" else None,
                     "status": status, "error": err, "raw_output": res.text, "model": res.model,
                     "prompt_version": req.prompt_version})
    return pl.DataFrame(rows, schema={"candidate_id": pl.Utf8, "query_id": pl.Utf8, "kind": pl.Utf8,
                                      "text": pl.Utf8, "judge_score": pl.Float64, "judge_reason": pl.Utf8,
                                      **_PROVENANCE})


# --------------------------------------------------------------------------- preference pairs

def prefer(a: dict, b: dict, direct_wins_ties: bool) -> tuple[dict | None, str]:
    """(preferred candidate or None, reason). Higher score wins; on a tie between a clarifying question
    and a direct answer the direct answer wins when ``direct_wins_ties`` (double-turn rule)."""
    if a["score"] is None or b["score"] is None:
        return None, "unscored candidate"
    if a["score"] != b["score"]:
        return (a if a["score"] > b["score"] else b), "higher score"
    if direct_wins_ties and {a["kind"], b["kind"]} == {"clarify", "direct"}:
        return (a if a["kind"] == "direct" else b), "tie: direct answer preferred"
    return None, "tie"


PAIR_SCHEMA = {
    "pair_id": pl.Utf8, "query_id": pl.Utf8, "question": pl.Utf8, "labeling": pl.Utf8, "pair_type": pl.Utf8,
    "candidate_a": pl.Utf8, "candidate_b": pl.Utf8, "chosen_id": pl.Utf8, "rejected_id": pl.Utf8,
    "chosen_kind": pl.Utf8, "rejected_kind": pl.Utf8, "chosen_text": pl.Utf8, "rejected_text": pl.Utf8,
    "chosen_score": pl.Float64, "rejected_score": pl.Float64, "kept": pl.Boolean, "reason": pl.Utf8,
    "n_candidates": pl.Int64,
}


def label_pairs(cands: pl.DataFrame, labeling: str, direct_wins_ties: bool) -> pl.DataFrame:
    """Every unordered pair of a query's candidates (n choose 2 rows per query); ``kept`` pairs have a
    chosen and a rejected side. ``cands``: query_id, question, candidate_id, kind, text, score."""
    rows = []
    for (qid,), group in cands.sort("candidate_id").group_by(["query_id"], maintain_order=True):
        items = group.to_dicts()
        for a, b in combinations(items, 2):
            win, reason = prefer(a, b, direct_wins_ties)
            lose = (b if win is a else a) if win is not None else None
            rows.append({
                "pair_id": f"{labeling}:{a['candidate_id']}|{b['candidate_id']}", "query_id": qid,
                "question": a["question"], "labeling": labeling,
                "pair_type": "clarify_vs_clarify" if a["kind"] == b["kind"] == "clarify" else "clarify_vs_direct",
                "candidate_a": a["candidate_id"], "candidate_b": b["candidate_id"],
                "chosen_id": win["candidate_id"] if win else None, "rejected_id": lose["candidate_id"] if lose else None,
                "chosen_kind": win["kind"] if win else None, "rejected_kind": lose["kind"] if lose else None,
                "chosen_text": win["text"] if win else None, "rejected_text": lose["text"] if lose else None,
                "chosen_score": win["score"] if win else None, "rejected_score": lose["score"] if lose else None,
                "kept": win is not None, "reason": reason, "n_candidates": len(items),
            })
    return pl.DataFrame(rows, schema=PAIR_SCHEMA)


def dpo_records(pairs: pl.DataFrame) -> list[dict[str, Any]]:
    """TRL conversational preference rows: prompt / chosen / rejected as message lists (kept pairs only)."""
    return [{"prompt": [_msg("user", r["question"])], "chosen": [_msg("assistant", r["chosen_text"])],
             "rejected": [_msg("assistant", r["rejected_text"])]}
            for r in pairs.filter(pl.col("kept")).iter_rows(named=True)]


# --------------------------------------------------------------------------- evaluation: answer-set F1 (Table 1, 4)

SYSTEMS = {  # system -> (prompt, inference)
    "direct_greedy": ("double_turn_subject_direct", "greedy"),
    "direct_sampled": ("double_turn_subject_direct", "sampled"),
    "clarify": ("double_turn_subject_clarify", "greedy"),
    "clarify_or_direct": ("double_turn_subject_decide", "greedy"),
}
SYSTEM_LABELS = {"direct_greedy": "Direct-Ans (greedy)", "direct_sampled": "Direct-Ans (sampled)",
                 "clarify": "Clarify", "clarify_or_direct": "Clarify-or-Direct",
                 "random_baseline": "Random (DA% of Clarify-or-Direct)"}

_CLARIFY_RE = re.compile(r"^[\s\"'*_>#`]*(?:assistant\s*:\s*)?[\s\"'*_`]*clarifying\s+question\s*[:\-][\s*_`]*", re.I)
_ANSWER_PREFIX = re.compile(r"^\s*(?:the\s+(?:short\s+)?answer\s+is|(?:short\s+)?answer\s*:|a\s*:)\s*[:\-]?\s*", re.I)


DECIDE_SCHEMA = {"type": "object",
                 "properties": {"action": {"type": "string", "enum": ["answer", "clarify"]},
                                "text": {"type": "string", "minLength": 1, "maxLength": 160}},
                 "required": ["action", "text"]}
SUBJECT_SCHEMAS = {"direct_greedy": ANSWER_SCHEMA, "direct_sampled": ANSWER_SCHEMA, "clarify": CLARIFY_SCHEMA,
                   "clarify_or_direct": DECIDE_SCHEMA}


def subject_requests(queries: pl.DataFrame, n_samples: int, temperature: float, seed: int,
                     max_tokens: int, output: str = "free_text") -> tuple[list[dict], list[ChatRequest]]:
    """Turn-2 requests for one subject: the four systems of Table 1 for every query.

    ``output="free_text"`` is the paper's protocol (phi reads the reply's prefix); ``"json"`` enforces the
    protocol with a schema for weak models (answer / clarifying question / {action, text}), and
    :func:`subject_reply_text` turns the JSON back into protocol text before phi reads it.
    """
    plan, reqs = [], []
    for q in queries.iter_rows(named=True):
        for system, (name, inference) in SYSTEMS.items():
            prompt = load_prompt(name)
            sampled = inference == "sampled"
            plan.append({"query_id": q["query_id"], "system": system, "output": output})
            reqs.append(ChatRequest.of(prompt.messages(question=q["question"]), prompt.version,
                                       SUBJECT_SCHEMAS[system] if output == "json" else None,
                                       temperature=temperature if sampled else 0.0, seed=seed,
                                       n=n_samples if sampled else 1, max_tokens=max_tokens))
    return plan, reqs


def subject_reply_text(system: str, raw: str, output: str) -> str:
    """The reply as protocol text: free text as is; JSON replies rendered as the answer or as
    "Clarifying Question: ..." (a field that already carries the prefix keeps it). Unparseable JSON -> ""."""
    if output != "json":
        return raw
    obj, _ = parse_json_object(raw)
    if obj is None:
        return ""
    if system in ("direct_greedy", "direct_sampled"):
        return str(obj.get("answer", ""))
    if system == "clarify":
        text, action = str(obj.get("clarifying_question", "")), "clarify"
    else:
        text, action = str(obj.get("text", "")), obj.get("action")
    if action == "clarify" and text.strip() and not _CLARIFY_RE.match(text):
        return clarify_text(text)
    return text


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
                "status": "ok" if cq else "parse_error", "error": None if cq else "empty clarifying question"}
    ans = extract_short_answer(raw)
    return {"action": "answer", "clarifying_question": None, "answer": ans,
            "status": "ok" if ans else "parse_error", "error": None if ans else "empty reply"}


def eval_episodes(qa: pl.DataFrame, subject: str, plan: list[dict], requests: list[ChatRequest],
                  results: list[ChatResult]) -> list[dict[str, Any]]:
    """Parse turn 2 of every (query, system); list the user-simulation items needed for clarify turns."""
    qinfo = {q["query_id"]: q for q in qa.iter_rows(named=True)}
    episodes = []
    for p, req, res in zip(plan, requests, results, strict=True):
        q = qinfo[p["query_id"]]
        ep = {"subject": subject, "system": p["system"], "query_id": q["query_id"], "question": q["question"],
              "is_ambiguous": q["is_ambiguous"], "n_gold": q["n_interpretations"], "gold": q["answers"],
              "raw_outputs": list(res.texts), "raw_output": res.text, "model": res.model,
              "prompt_version": req.prompt_version}
        if res.error:
            ep.update(action=None, clarifying_question=None, answers=[], status="llm_error", error=res.error)
        elif p["system"] == "direct_sampled":
            answers = [extract_short_answer(subject_reply_text(p["system"], t, p["output"])) for t in res.texts]
            top = top_k_answers(answers, q["n_interpretations"])
            ep.update(action="answer", clarifying_question=None, answers=top,
                      status="ok" if top else "parse_error", error=None if top else "no usable sample")
        else:
            t2 = parse_turn2(subject_reply_text(p["system"], res.text, p["output"]))
            ep.update(action=t2["action"], clarifying_question=t2["clarifying_question"],
                      answers=[t2["answer"]] if t2["action"] == "answer" else [], status=t2["status"],
                      error=t2["error"])
        episodes.append(ep)
    return episodes


def episode_user_items(episodes: list[dict]) -> list[dict]:
    """(episode, user i) items for every clarify turn with a usable question."""
    items = []
    for e, ep in enumerate(episodes):
        if ep["action"] == "clarify" and ep["clarifying_question"]:
            for i, aliases in enumerate(ep["gold"]):
                items.append({"episode": e, "user_index": i, "question": ep["question"],
                              "clarifying_question": ep["clarifying_question"], "expected_answer": aliases[0],
                              "aliases": aliases})
    return items


EVAL_SCHEMA = {
    "subject": pl.Utf8, "system": pl.Utf8, "query_id": pl.Utf8, "is_ambiguous": pl.Boolean, "n_gold": pl.Int64,
    "action": pl.Utf8, "turns": pl.Int64, "clarifying_question": pl.Utf8, "predictions": pl.List(pl.Utf8),
    "owners": pl.List(pl.Int64), "user_replies": pl.List(pl.Utf8), "abstain_reasons": pl.List(pl.Utf8),
    "precision": pl.Float64, "recall": pl.Float64, "f1": pl.Float64, "raw_outputs": pl.List(pl.Utf8),
    "final_raw_outputs": pl.List(pl.Utf8), **_PROVENANCE,
}


def score_episodes(episodes: list[dict], items: list[dict], sims: list[dict], finals: list[tuple]) -> pl.DataFrame:
    """One row per (subject, system, query): the answer set R, F1 against the gold set, model turns.

    ``sims[j]`` is parse_simulation's dict for items[j]; ``finals[j]`` is (answer, status, error, raw) for
    items[j] or None when the user abstained. Direct systems: R as a set, any gold may be matched.
    Clarify turns: R = {y_hat_i}, each counted only when correct for its own user i.
    ``raw_output`` is the turn-2 reply (sample 0 for Direct-Ans sampled; every sample is in ``raw_outputs``,
    the user simulator's and final answerer's replies in ``user_replies`` / ``final_raw_outputs``).
    """
    per_episode: dict[int, list[int]] = {}
    for j, it in enumerate(items):
        per_episode.setdefault(it["episode"], []).append(j)
    rows = []
    for e, ep in enumerate(episodes):
        row = {k: ep[k] for k in ("subject", "system", "query_id", "is_ambiguous", "n_gold", "action",
                                  "clarifying_question", "raw_outputs", "raw_output", "model", "prompt_version",
                                  "status", "error")}
        row.update(owners=None, user_replies=None, abstain_reasons=None, final_raw_outputs=None,
                   turns=2 if ep["action"] == "clarify" else 1)
        if ep["action"] == "clarify":
            js = per_episode.get(e, [])
            preds, owners, replies, reasons, raws = [], [], [], [], []
            failed = False
            for j in js:
                sim, fin = sims[j], finals[j]
                replies.append(sim["reply"])
                reasons.append(sim["abstain_reason"])
                owners.append(items[j]["user_index"])
                failed |= sim["status"] == "llm_error" or (fin is not None and fin[1] == "llm_error")
                preds.append(fin[0] if fin is not None else None)
                raws.append(fin[3] if fin is not None else None)
            if not js:  # unusable clarifying question: every user is unserved
                preds, owners = [None] * ep["n_gold"], list(range(ep["n_gold"]))
            row.update(predictions=preds, owners=owners, user_replies=replies or None,
                       abstain_reasons=reasons or None, final_raw_outputs=raws or None)
            if failed and row["status"] == "ok":
                row.update(status="llm_error", error="a user simulation or final answer failed")
            score = answer_set_f1(preds, ep["gold"], owners)
        else:
            row["predictions"] = ep["answers"] or [None]
            score = answer_set_f1(row["predictions"], ep["gold"])
        if row["status"] == "llm_error":
            score = {"precision": None, "recall": None, "f1": None}
        rows.append(row | score)
    return pl.DataFrame(rows, schema=EVAL_SCHEMA).select(list(EVAL_SCHEMA))


EVALUATED = ("ok", "parse_error")  # an unusable reply counts as wrong; LLM failures are excluded and counted


def answer_set_table(interactions: pl.DataFrame, repeats: int, seed: int) -> pl.DataFrame:
    """Table 1 (avg turns, F1 Unambiguous / Ambiguous / Total) per subject x system, with Table 4's DA% and
    Direct-Answer accuracy for Clarify-or-Direct and the random baseline at the same DA%."""
    out = []
    for (subject,), sub in interactions.group_by(["subject"], maintain_order=True):
        ev = sub.filter(pl.col("status").is_in(EVALUATED))
        for system in SYSTEMS:
            rows = ev.filter(pl.col("system") == system)
            out.append(_table_row(subject, system, rows, sub.filter(pl.col("system") == system).height - rows.height))
        # Table 4: decisions of Clarify-or-Direct vs a random decision at the same DA%
        wide = {}
        for system in ("direct_greedy", "clarify", "clarify_or_direct"):
            for r in ev.filter(pl.col("system") == system).iter_rows(named=True):
                wide.setdefault(r["query_id"], {})[system] = r
        complete = [w for w in wide.values() if len(w) == 3]
        cod = out[-1]
        if complete:
            should = [not w["direct_greedy"]["is_ambiguous"] and w["direct_greedy"]["f1"] == 1.0 for w in complete]
            answered = [w["clarify_or_direct"]["action"] == "answer" for w in complete]
            da_rate = sum(answered) / len(complete)
            cod.update(da_rate=da_rate, da_accuracy=direct_answer_accuracy(answered, should))
            base = random_decision_baseline([w["direct_greedy"]["f1"] for w in complete],
                                            [w["clarify"]["f1"] for w in complete], should, da_rate, repeats, seed)
            amb = [w["direct_greedy"]["is_ambiguous"] for w in complete]
            out.append({
                "subject": subject, "system": "random_baseline", "label": SYSTEM_LABELS["random_baseline"],
                "n_queries": len(complete), "n_excluded": 0, "avg_turns": 2 - base["da_rate"],
                "f1_unambiguous": _mean([f for f, a in zip(base["per_query_f1"], amb) if not a]),
                "f1_ambiguous": _mean([f for f, a in zip(base["per_query_f1"], amb) if a]),
                "f1_total": base["f1"], "n_unambiguous": amb.count(False), "n_ambiguous": amb.count(True),
                "da_rate": base["da_rate"], "da_accuracy": base["da_accuracy"], "repeats": repeats,
            })
    return pl.DataFrame(out, schema={
        "subject": pl.Utf8, "system": pl.Utf8, "label": pl.Utf8, "n_queries": pl.Int64, "n_excluded": pl.Int64,
        "avg_turns": pl.Float64, "f1_unambiguous": pl.Float64, "f1_ambiguous": pl.Float64, "f1_total": pl.Float64,
        "n_unambiguous": pl.Int64, "n_ambiguous": pl.Int64, "da_rate": pl.Float64, "da_accuracy": pl.Float64,
        "repeats": pl.Int64})


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _table_row(subject: str, system: str, rows: pl.DataFrame, excluded: int) -> dict[str, Any]:
    amb = rows.filter(pl.col("is_ambiguous"))
    una = rows.filter(~pl.col("is_ambiguous"))
    return {"subject": subject, "system": system, "label": SYSTEM_LABELS[system], "n_queries": rows.height,
            "n_excluded": excluded, "avg_turns": _mean(rows["turns"].to_list()),
            "f1_unambiguous": _mean(una["f1"].to_list()), "f1_ambiguous": _mean(amb["f1"].to_list()),
            "f1_total": _mean(rows["f1"].to_list()), "n_unambiguous": una.height, "n_ambiguous": amb.height,
            "da_rate": None, "da_accuracy": None, "repeats": None}
