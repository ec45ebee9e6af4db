"""`judge_scores` with a remote judge: BERTScore beside the judge's calls (overlap) vs after them.

    .venv/bin/python benchmarks/bench_judge_overlap.py          # also: run.py --only judge_overlap

Synthetic clarify turns (12 subtypes x 3 methods x TURNS_PER_SUBTYPE, questions from a fixed vocabulary), the judge
on the `openai` backend against latency_server.py with LATENCY_MS per reply at concurrency CONCURRENCY, the real
MiniLM BERTScore (loaded once before both arms). Each arm starts from an empty LLM cache; the two outputs must
be equal.
"""

from __future__ import annotations

import random
import tempfile
import time

import polars as pl
from _common import BenchResult, print_standalone, ratio, say
from bench_backends import latency_stub

SUBTYPES = [f"subtype_{i}" for i in range(12)]
METHODS = ("base", "cot", "clarify_agent")
TURNS_PER_SUBTYPE = 80
JUDGED_PER_SUBTYPE = 16  # judge calls = 12 x 16 x 3 methods
LATENCY_MS, CONCURRENCY = 500, 8
WORDS = ("which city budget version library deadline flight hotel recipe account river meeting report python "
         "do you mean the for home or work paris bank coffee").split()


def _question(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 14))).capitalize() + "?"


def _frames() -> tuple[pl.DataFrame, pl.DataFrame]:
    rng = random.Random(7)
    rows, msgs = [], []
    for s in SUBTYPES:
        for t in range(TURNS_PER_SUBTYPE):
            did, ref = f"{s}-{t}", _question(rng)
            msgs.append({"dataset": "d", "dialogue_id": did, "turn": 1,
                         "messages": [{"role": "user", "content": f"Help me plan {did}."}]})
            rows += [{"dataset": "d", "subject": "s", "method": m, "dialogue_id": did, "turn": 1, "subtype": s,
                      "persona": "precise", "reference_action": "clarify", "reference_question": ref,
                      "status": "ok", "action": "clarify", "response": _question(rng)} for m in METHODS]
    return pl.DataFrame(rows), pl.DataFrame(msgs)


def bench_judge_overlap() -> BenchResult:
    from dagster_project.config import EvaluationConfig, parse_params
    from dagster_project.core.clarifymt.judge import judge_scores
    from dagster_project.core.shared.metrics import bertscore_f1
    from dagster_project.llm.client import LLMClient
    from dagster_project.llm.embedder import minilm_path

    res = BenchResult("judge_overlap")
    preds, messages = _frames()
    cfg = EvaluationConfig(judge_per_subtype=JUDGED_PER_SUBTYPE)
    bert_s: list[float] = []

    def bertscore(cands: list[str], refs: list[str]) -> list[float]:
        t = time.perf_counter()
        out = bertscore_f1(cands, refs, minilm_path(), cfg.bertscore_layers)
        bert_s.append(time.perf_counter() - t)
        return out

    bertscore_f1(["warm up"], ["the encoder"], minilm_path(), cfg.bertscore_layers)  # imports + load, untimed
    walls, outs, calls = {}, {}, {}
    with latency_stub(LATENCY_MS) as url, tempfile.TemporaryDirectory(prefix="bench_judge_") as d:
        for arm in ("after", "beside"):  # an empty cache each: every judge call is sent
            llm = parse_params({"llm": {"cache_path": f"{d}/{arm}.sqlite", "roles": {
                "default": {"model": "local"}, "judge": {"backend": "openai", "base_url": url + "/v1",
                                                         "model": "stub-judge", "concurrency": CONCURRENCY}}}}).llm
            client = LLMClient(llm)
            sent: list[int] = []

            def chat(role, requests, client=client, sent=sent):
                sent.append(len(requests))
                return client.chat(role, requests)

            say(f"judge_overlap: BERTScore {arm} the judge's calls")
            t = time.perf_counter()
            outs[arm] = judge_scores(chat, preds, messages, cfg, "stub-judge", bertscore, overlap=arm == "beside")
            walls[arm], calls[arm] = time.perf_counter() - t, sum(sent)
    if not outs["after"].equals(outs["beside"]):
        raise RuntimeError("judge_scores differs with BERTScore beside the judge's calls")
    floor = calls["after"] * LATENCY_MS / 1000 / CONCURRENCY
    res.add("pairs", preds.height, "candidate turns scored (BERTScore pairs)",
            note=f"{calls['after']} judge calls at {LATENCY_MS} ms per reply, concurrency {CONCURRENCY}: "
                 f"{floor:.1f} s of waiting at least")
    res.add("after_s", walls["after"], "BERTScore after the judge's calls", "s", note=f"BERTScore {bert_s[0]:.1f} s")
    res.add("beside_s", walls["beside"], "BERTScore beside the judge's calls", "s", note=f"BERTScore {bert_s[1]:.1f} s")
    res.add("overlap_speedup", ratio(walls["after"], walls["beside"]), "after / beside",
            note="identical outputs; the best is (judge + BERTScore) / max(judge, BERTScore)")
    return res


if __name__ == "__main__":
    print_standalone(bench_judge_overlap(), "judge_overlap")
