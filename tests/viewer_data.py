"""Evaluation tables in the pipeline's real layout (evaluation.predictions partitions, judge_scores,
benchmark.persona_dialogues, evaluation.external_dialogues) for the transcript viewer's tests and its size /
first-paint measurement (benchmarks/bench_viewer.py); nothing here runs a model."""

from __future__ import annotations

import json
import random
from pathlib import Path

import dagster as dg
import polars as pl

from dagster_project.core.shared.taxonomy import PERSONAS
from dagster_project.lib.warehouse import partition_path, write_parquet_atomic

METHODS = ("base", "majority_vote", "cot", "intent_sim", "at_cot", "clarify_agent", "clarify_agent_no_planner",
           "clarify_agent_no_perceiver", "clarify_agent_no_forecaster")
SUBTYPES = ("lexical", "semantic", "who", "when", "where", "what")


def _messages(utterances: list[str], questions: list[str]) -> list[dict[str, str]]:
    out = []
    for i, u in enumerate(utterances):
        if i:
            out.append({"role": "assistant", "content": questions[i - 1]})
        out.append({"role": "user", "content": u})
    return out


def dialogues(n_queries: int, dataset: str = "clarifymt") -> pl.DataFrame:
    """persona_dialogues rows: each query x 6 personas, 2 or 3 turns, reference action and question per turn."""
    rows = []
    for q in range(n_queries):
        for p in PERSONAS:
            did = f"q{q:05d}-{p.key}"
            users = [f"Query {q}: how do I book the {q % 7} o'clock slot for my trip?",
                     f"{p.name} reply {q}: the one near the station, I think.",
                     f"{p.name} second reply {q}: maybe the other one after all."][:p.turns]
            questions = [f"Which city is the trip to, for query {q}?", f"Which station do you mean ({q})?"]
            refs = ["clarify", *(["answer"] if p.turns == 2 else ["clarify", "clarify"])]
            for t in range(1, p.turns + 1):
                rows.append({"dataset": dataset, "dialogue_id": did, "query_id": f"q{q:05d}",
                             "subtype": SUBTYPES[q % len(SUBTYPES)], "persona": p.key, "turn": t, "n_turns": p.turns,
                             "messages": _messages(users[:t], questions), "user_utterance": users[t - 1],
                             "reference_action": refs[t - 1],
                             "reference_question": questions[t - 1] if refs[t - 1] == "clarify" and t <= 2 else None,
                             "status": "ok", "error": None})
    return pl.DataFrame(rows)


def _trace(rng: random.Random, q: int, t: int) -> str:
    slots = [{"name": f"slot_{k}", "state": rng.choice(["filled", "unfilled", "conflict"]), "value": f"v{q}-{k}"}
             for k in range(3)]
    return json.dumps({
        "input": {"request": f"book the slot for query {q}", "latest": f"turn {t} reply"},
        "perceiver": [{"slot": s["name"], "value": s["value"], "evidence": f"the user said {s['value']}"} for s in slots],
        "transitions": [{"slot": s["name"], "from": "unfilled", "to": s["state"]} for s in slots],
        "forecaster": rng.choice([p.key for p in PERSONAS]),
        "plan": {"action": rng.choice(["clarify", "answer"]), "target_slot": "slot_0",
                 "reason": f"slot_0 is still open at turn {t}"},
        "raw": {"planner": "{\"action\": \"clarify\"}" * 3, "perceiver": "[...]" * 20},
    }, sort_keys=True)


def predictions(turns: pl.DataFrame, subjects: tuple[str, ...] = ("smollm2",), methods: tuple[str, ...] = METHODS,
                seed: int = 0) -> dict[tuple[str, str], pl.DataFrame]:
    """(subject, method) -> that partition's predictions over every turn (subject/method left to the folders)."""
    rng = random.Random(seed)
    keep = ["dataset", "dialogue_id", "query_id", "subtype", "persona", "turn", "reference_action",
            "reference_question"]
    base = turns.select(keep).to_dicts()
    out = {}
    for subject in subjects:
        for method in methods:
            agent = method.startswith("clarify_agent")
            rows = []
            for r in base:
                action = rng.choice(["clarify", "answer", "clarify", "invalid"])
                q = int(r["query_id"][1:])
                response = (f"Which city do you mean for query {q}, turn {r['turn']}?" if action == "clarify" else
                            f"The best option for query {q} is the morning train." if action == "answer" else None)
                rows.append({**r, "action": action, "response": response,
                             "status": "parse_error" if action == "invalid" else "ok",
                             "error": None, "raw_output": response or "I am not sure.",
                             "trace": _trace(rng, q, r["turn"]) if agent else json.dumps({"votes": [action] * 3}),
                             "llm_calls": 5 if agent else 1, "is_question": True if action == "clarify" else None,
                             "slots": json.dumps([{"name": "slot_0", "state": "filled"}]) if agent else None,
                             "rsc": rng.random() < 0.5 if agent else None,
                             "persona_forecast": rng.choice([p.key for p in PERSONAS]) if agent else None,
                             "target_slot": "slot_0" if agent else None,
                             "decided_by": "planner" if agent else None, "assumptions": None,
                             "step_errors": 0 if agent else None, "source": "benchmark.persona_dialogues"})
            out[(subject, method)] = pl.DataFrame(rows, infer_schema_length=None)
    return out


def judge_scores(preds: dict[tuple[str, str], pl.DataFrame], every: int = 5) -> pl.DataFrame:
    """A 0-5 judge score on every `every`-th clarify turn of each method (the sample), null elsewhere."""
    frames = []
    for (subject, method), df in preds.items():
        cands = df.filter(pl.col("reference_action") == "clarify").with_row_index("_i")
        frames.append(cands.select(
            "dataset", "dialogue_id", "turn", "subtype", "persona", "reference_question", "action", "response",
            subject=pl.lit(subject), method=pl.lit(method), sampled=(pl.col("_i") % every) == 0,
            score=pl.when((pl.col("_i") % every) == 0).then((pl.col("_i") % 6).cast(pl.Int64)),
            judged_by=pl.when((pl.col("_i") % every) == 0).then(pl.lit("judge"))))
    return pl.concat(frames)


def write_assets(base: Path, n_queries: int, subjects: tuple[str, ...] = ("smollm2",),
                 methods: tuple[str, ...] = METHODS, external: int = 0) -> dict[str, int]:
    """The tables under `base` (an assets folder): clarifymt from `n_queries` queries, plus an external dataset
    `clariq` of `external` queries when > 0; returns row counts."""
    bench = dialogues(n_queries)
    write_parquet_atomic(bench.drop("dataset"), base / "benchmark" / "persona_dialogues.parquet")
    ext = dialogues(external, "clariq") if external else bench.clear()
    write_parquet_atomic(ext, base / "evaluation" / "external_dialogues.parquet")
    preds = predictions(pl.concat([bench, ext]), subjects, methods)
    for (subject, method), df in preds.items():
        key = dg.MultiPartitionKey({"subject": subject, "method": method})
        write_parquet_atomic(df, partition_path(base, "evaluation", "predictions", key))
    write_parquet_atomic(judge_scores(preds), base / "evaluation" / "judge_scores.parquet")
    return {"turns": bench.height + ext.height, "predictions": sum(df.height for df in preds.values())}
