"""Issue 15 items 8-11: the intents group follows the paper's judge prompt, adds label-dropout examples, carries the
edit prompt's examples, covers every intent pair of a small catalogue and bounds the judge's error rate."""

import json

import polars as pl

from dagster_project.config import IntentsConfig
from dagster_project.core.intents.catalog import Catalog, Intent
from dagster_project.core.intents.scoring import score_conversations
from dagster_project.core.intents.simulation import (
    ConversationSeed,
    simulate_conversations,
)
from dagster_project.llm.chat import ChatResult

NAMES = ["track_order", "cancel_order", "return_item"]


def _catalog() -> Catalog:
    return Catalog(tuple(Intent(n, f"about {n}", ()) for n in NAMES))


def _recording(answers: dict[str, list[str]]):
    """chat() answering each role from a queue and keeping every request it was sent."""
    queues = {role: list(texts) for role, texts in answers.items()}
    sent = []

    def chat(role, reqs):
        sent.extend((role, r) for r in reqs)
        return [ChatResult(texts=[queues[role].pop(0)], model="m") for _ in reqs]

    return chat, sent


def _text(req) -> str:
    return "\n".join(m["content"] if isinstance(m["content"], str) else str(m["content"]) for m in req.messages)


def test_ars_judge_never_sees_the_true_query_and_judges_every_clarifying_conversation():
    secret = "please cancel order 4471 placed on monday"
    ask = json.dumps({"action": "ask_clarifying_question", "intent": "none", "question": "Which order?"})
    pred = json.dumps({"action": "predict_intent", "intent": "track_order", "question": ""})
    seeds = [ConversationSeed("a", "ambiguous", "qa", "help with my order", secret, "cancel_order", tuple(NAMES),
                              "train", "edit", max_turns=1),
             ConversationSeed("u", "unambiguous", "qu", "where is my parcel", "where is my parcel", "track_order",
                              tuple(NAMES), "train", max_turns=1),
             ConversationSeed("v", "unambiguous", "qv", "track it", "track it", "track_order", tuple(NAMES),
                              "train", max_turns=1)]
    sim, _ = _recording({"assistant": [ask, ask, pred]})
    turns = simulate_conversations(seeds, sim, _catalog(), [], IntentsConfig())
    top = {"relevance": "relevant", "conciseness": "concise", "repetition": "not repetitive",
           "factuality": "not hallucinating", "politeness": "polite"}
    judge, sent = _recording({"judge": [json.dumps({"judgments": ["not enough"]})] * 2
                              + [json.dumps({"ratings": [top]})] * 2})
    scores = score_conversations(turns, judge, _catalog(), IntentsConfig())
    info = [r for _, r in sent if "judgments" in json.dumps(r.json_schema)]
    assert len(info) == 2  # the ambiguous one and the unambiguous one that clarified; not the direct prediction
    assert all(secret not in _text(r) for _, r in sent)
    src = dict(scores.select("conversation_id", "info_source").unique().iter_rows())
    assert src == {"a": "judge", "u": "judge", "v": "by_construction"}


def test_edit_prompt_carries_a_positive_and_a_negative_example():
    from dagster_project.core.intents.ambiguous import generate_edits

    names = ["cancel_order", "track_order", "change_delivery_address", "account_access"]
    cat = Catalog(tuple(Intent(n, f"about {n}", ()) for n in names))
    cfg = IntentsConfig()
    chat, sent = _recording({"generator": ['{"modified_query": "about my order", "potential_intents": []}']})
    generate_edits(chat, pl.DataFrame({"utterance_id": ["u1"], "split": ["train"], "text": ["where is it"],
                                       "intent": ["track_order"]}), cat, cfg)
    text = _text(sent[0][1])
    assert cfg.edit_positive.modified_query in text and cfg.edit_negative.modified_query in text
    assert cfg.edit_positive.why in text and cfg.edit_negative.why in text


def test_intent_pairs_cover_every_pair_of_a_small_catalogue_and_sample_above_the_param():
    from itertools import combinations

    from dagster_project.core.intents.ambiguous import pair_plan

    names = ["a", "b", "c", "d", "e"]  # 10 pairs
    every = pair_plan(names, IntentsConfig(n_pair_train=3, n_pair_test=1, pair_sample_above=10))
    assert {tuple(sorted(p)) for p in every.select("intent_a", "intent_b").iter_rows()} == set(combinations(names, 2))
    assert every["coverage"].unique().to_list() == ["all"]
    assert every["split"].value_counts().sort("split").rows() == [("test", 2), ("train", 8)]  # 3:1 of 10, rounded
    sampled = pair_plan(names, IntentsConfig(n_pair_train=3, n_pair_test=1, pair_sample_above=9))
    assert sampled.height == 4 and sampled["coverage"].unique().to_list() == ["sampled"]


def _scores(statuses: dict[str, str]) -> pl.DataFrame:
    """conversation_scores rows (one turn each) with the given score_status per conversation."""
    return pl.DataFrame([{"subject": "s", "conversation_id": cid, "kind": "ambiguous", "assistant_turn": 1,
                          "sdrs": 1.0 if st == "ok" else None, "ars": 1 if st == "ok" else None, "relevance": None,
                          "conciseness": None, "repetition_avoidance": None, "factuality": None, "politeness": None,
                          "score_status": st, "outcome": "correct"} for cid, st in statuses.items()])


def test_judge_failures_are_counted_not_hidden_in_the_eval_table_and_the_sweep():
    from dagster_project.core.intents.curation import keep_percentile_sweep
    from dagster_project.core.intents.evaluation import intent_eval_table
    from dagster_project.core.intents.scoring import conversation_table

    statuses = {"a1": "ok", "a2": "judge_llm_error", "a3": "judge_parse_error"}
    turns = pl.DataFrame([{"subject": "s", "conversation_id": c, "kind": "ambiguous", "outcome": "correct",
                           "n_assistant_turns": 1, "llm_calls": 1} for c in statuses])
    r = intent_eval_table(turns, _scores(statuses)).row(0, named=True)
    assert (r["n_total"], r["n_scored"], r["n_judge_failed"]) == (3, 1, 2)
    conv = _scores(statuses).with_columns(split=pl.lit("train"), method=pl.lit("edit"), query_id=pl.col(
        "conversation_id"), true_intent=pl.lit("x"), n_turns=pl.lit(1), A=pl.lit(1.0), R=pl.lit(None))
    sweep = keep_percentile_sweep(conversation_table(conv), [100.0])
    assert sweep.select("n_total", "n_scored").row(0) == (3, 1)


def test_conversation_scores_check_bounds_the_judge_error_rate():
    from dagster_project.config import parse_params
    from dagster_project.defs.quality.checks import load_suites, validate_frame

    suite = {f"{s.group}/{s.asset}": s for s in load_suites()}["intents/conversation_scores"]
    params = parse_params({"quality": {"max_error_rate": 0.2}})
    base = _scores({f"c{i}": "ok" for i in range(9)} | {"c9": "judge_llm_error"}).with_columns(
        sdrs=pl.col("sdrs").fill_null(0.0), A=pl.col("sdrs").fill_null(0.0), R=pl.lit(None, pl.Float64), n_turns=pl.lit(1),
        action=pl.lit("intent"))
    assert validate_frame(base, suite, params)[0]  # 1 in 10 failed
    worse = base.with_columns(score_status=pl.when(pl.col("conversation_id").is_in(["c7", "c8"]))
                              .then(pl.lit("judge_parse_error")).otherwise(pl.col("score_status")))
    ok, meta = validate_frame(worse, suite, params)
    failed = [k for k, v in meta.items() if not v["success"]]
    assert not ok and len(failed) == 1 and "judge error rate" in failed[0]  # 3 in 10 > 0.2
