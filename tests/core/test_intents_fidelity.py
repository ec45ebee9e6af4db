"""Issue 15 items 8-11: the intents group follows the paper's judge prompt, adds label-dropout examples, carries the
edit prompt's examples, covers every intent pair of a small catalogue and bounds the judge's error rate."""

import json

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
