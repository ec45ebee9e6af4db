"""Benchmark 4: parse_decision / parse_json_object throughput on messy model output."""

from __future__ import annotations

import json
import random
from collections import Counter

from _common import BenchResult, say, timer

from dagster_project.llm.task import parse_json_object
from dagster_project.llm.protocol import parse_decision

_WORDS = ("the", "flight", "leaves", "at", "noon", "python", "list", "sorted", "recipe", "needs", "two", "eggs",
          "which", "city", "do", "you", "mean", "budget", "deadline", "version", "of", "library", "is", "it",
          "for", "home", "or", "work", "Paris", "bank", "account", "river", "coffee", "meeting", "report")


def _text(rng: random.Random, lo: int = 3, hi: int = 40) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(lo, hi)))


def _obj(rng: random.Random) -> str:
    return json.dumps({"action": rng.choice(["answer", "clarify"]), "question": _text(rng, 3, 15),
                       "score": rng.randint(1, 5)})


# Each maker returns one reply shaped like what small models actually emit.
_MAKERS = (
    lambda r: f"The answer is {_text(r)}.",
    lambda r: f"the clarifying question is: {_text(r)}?",
    lambda r: f"  **The Clarifying Question Is** {_text(r)}?",
    lambda r: f"Assistant: The answer is {_text(r)}",
    lambda r: f"> THE ANSWER IS\n\n{_text(r)}",
    lambda r: f"`The clarifying question is` - {_text(r)}?",
    lambda r: f"I think the answer is {_text(r)}",                       # invalid: not at the start
    lambda r: _text(r, 10, 80),                                           # invalid: no prefix at all
    lambda r: "",
    lambda r: _obj(r),
    lambda r: f"```json\n{_obj(r)}\n```",
    lambda r: f"Sure! Here is the JSON you asked for: {_obj(r)} Hope it helps, {_text(r, 2, 10)}.",
    lambda r: _obj(r)[: r.randint(5, 40)],                                # truncated at max_tokens
    lambda r: "[1, 2, 3]",
    lambda r: f"{_obj(r)} and also {_obj(r)}",                           # two objects: outer slice invalid
    lambda r: f"```\n{{'single': 'quotes', 'x': {r.randint(0, 9)}}}\n```",
)


def make_strings(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(_MAKERS)(rng) for _ in range(n)]


def bench_parsing(n: int = 100_000, repeats: int = 3) -> BenchResult:
    """Best of `repeats` passes over the same strings (like timeit): the least-disturbed run."""
    res = BenchResult("parsing")
    say(f"parsing: building {n:,} messy strings")
    texts = make_strings(n)
    avg_len = sum(map(len, texts)) / n

    t_dec, t_json = [float("inf")], [float("inf")]
    for k in range(repeats):
        say(f"parsing: parse_decision, pass {k + 1}/{repeats}")
        with timer() as t:
            decisions = [parse_decision(s) for s in texts]
        t_dec[0] = min(t_dec[0], t[0])
        say(f"parsing: parse_json_object, pass {k + 1}/{repeats}")
        with timer() as t:
            objs = [parse_json_object(s) for s in texts]
        t_json[0] = min(t_json[0], t[0])

    actions = Counter(d.action for d in decisions)
    json_ok = sum(1 for o, *_ in objs if o is not None)  # (object, reason, repaired)
    res.add("n_strings", n, "strings (mixed prefix / JSON / junk)", note=f"mean {avg_len:.0f} chars")
    res.add("parse_decision_s", t_dec[0], "parse_decision time", "s", note=f"best of {repeats}")
    res.add("parse_decision_rows_per_s", n / t_dec[0], "parse_decision throughput", "rows/s",
            note=f"answer {actions['answer']:,} / clarify {actions['clarify']:,} / invalid {actions['invalid']:,}")
    res.add("parse_json_object_s", t_json[0], "parse_json_object time", "s", note=f"best of {repeats}")
    res.add("parse_json_object_rows_per_s", n / t_json[0], "parse_json_object throughput", "rows/s",
            note=f"{json_ok:,} objects, {n - json_ok:,} with a reason")
    res.add("decision_vs_json_speed_ratio", t_json[0] / t_dec[0], "parse_decision speed / parse_json_object speed",
            "x")
    return res
