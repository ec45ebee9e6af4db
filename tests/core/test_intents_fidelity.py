"""Issue 15 items 8-11: the intents group follows the paper's judge prompt, adds label-dropout examples, carries the
edit prompt's examples, covers every intent pair of a small catalogue and bounds the judge's error rate."""

import json

import polars as pl
import pytest

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
