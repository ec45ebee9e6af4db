"""The `intents` group end to end with a scripted LLM on a tiny hand-written intent dataset (tmp cwd)."""

import json
import math
import re

import dagster as dg
import polars as pl
import pytest
import yaml
from fakes import ScriptedBackend, scripted_llm

from dagster_project.config import load_params
from dagster_project.defs.intents import assets as intents
from dagster_project.defs.quality.checks import build_checks
from dagster_project.lib.io_manager import WarehouseIOManager

INTENTS = {
    "track_order": ["where is my parcel", "when does my order arrive", "tracking shows nothing", "is my box out today"],
    "cancel_order": ["cancel my order please", "stop the purchase", "Cancel it now", "call off order 12"],
    "return_item": ["send back the shoes", "return a broken mug", "print a return label", "return the dress"],
}
TEXT_TO_INTENT = {t.casefold(): i for i, ts in INTENTS.items() for t in ts}
WRONG = "cancel it now"  # the scripted assistant misclassifies this one
ASKS = {"tracking shows nothing", "book a flight to rome"}  # the scripted assistant asks once before answering


def _write_data(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    with open(d / "catalog.jsonl", "w") as f:
        for name, texts in INTENTS.items():
            f.write(json.dumps({"name": name, "description": f"about {name}", "examples": texts[:1]}) + "\n")
        f.write("{not json\n")  # a malformed record: refused, not fatal
    lines = ["text,intent,split"]
    for name, texts in INTENTS.items():
        lines += [f"{t},{name},{'test' if i == 3 else 'train'}" for i, t in enumerate(texts)]
    lines += ["book a flight to Rome,out_of_domain,test", " ,track_order,train", "upgrade plan,membership,train",
              "Where is my parcel,track_order,train"]
    raw = ("\n".join(lines) + "\n").encode() + b"bad \xff\xfe bytes,track_order,train\n"
    (d / "utterances.csv").write_bytes(raw)
    (d / "ambiguous.jsonl").write_text(
        json.dumps({"ambiguous_query": "help with my order (provided edit)", "unambiguous_query": "stop the purchase",
                    "true_intent": "cancel_order", "candidate_intents": ["cancel_order", "track_order"]}) + "\n"
        + json.dumps({"ambiguous_query": "x", "unambiguous_query": "y", "true_intent": "fly",
                      "candidate_intents": "fly|cancel_order"}) + "\n")
    (d / "few_shot.jsonl").write_text(json.dumps({"messages": [
        {"role": "user", "content": "where is my stuff"}, {"role": "assistant", "content": "track_order"}]}) + "\n")


def _intent_in(text: str) -> str | None:
    for name in INTENTS:
        if name in text:
            return name
    return None


def responder(job, idx):
    props = (job.json_schema or {}).get("properties", {})
    last = job.messages[-1]["content"]
    if "modified_query" in props:  # edit: keep the true intent, add a second one
        true = re.search(r"Its intent is (\w+)\.", last).group(1)
        other = next(n for n in INTENTS if n != true)
        return json.dumps({"modified_query": f"help with my order ({true} edit)",
                           "potential_intents": [{"intent": true, "reason": "r"}, {"intent": other, "reason": "r"}]})
    if "fitting_intents" in props:  # verifier: refuses edits made from return_item utterances
        q = re.search(r'Message: "(.*)"', last).group(1)
        return json.dumps({"ambiguous": "return_item" not in q, "fitting_intents": list(INTENTS)[:2], "reason": "r"})
    if "query_for_a" in props:
        a, b = re.findall(r"Intent [AB] is (\w+):", last)
        return json.dumps({"ambiguous_query": f"PAIR question {a} {b}", "query_for_a": f"I mean {a} only",
                           "query_for_b": f"I mean {b} only"})
    if "action" in props:  # the assistant / subject
        allowed = props["intent"]["enum"]
        users = [m["content"] for m in job.messages if m["role"] == "user"]
        first = users[0]
        if first.startswith("PAIR"):  # keeps asking: runs into max_turns
            return json.dumps({"action": "ask_clarifying_question", "intent": "none", "question": "Which one?"})
        if "edit)" in first:
            if len(users) == 1:
                return json.dumps({"action": "ask_clarifying_question", "intent": "none",
                                   "question": "Is it about tracking or cancelling?"})
            return json.dumps({"action": "predict_intent", "intent": _intent_in(users[-1]), "question": ""})
        if first.casefold() in ASKS and len(users) == 1:
            return json.dumps({"action": "ask_clarifying_question", "intent": "none", "question": "Anything else?"})
        true = TEXT_TO_INTENT.get(first.casefold())
        if first.casefold() == WRONG:
            true = "return_item"
        if true is None or true not in allowed:
            return json.dumps({"action": "out_of_domain", "intent": "none", "question": ""})
        return json.dumps({"action": "predict_intent", "intent": true, "question": ""})
    if "reply" in props:  # user simulator: reveals the intent of the unambiguous query
        want = re.search(r'What you actually want: "(.*)"', last).group(1)
        return json.dumps({"reply": f"it is about {_intent_in(want) or TEXT_TO_INTENT.get(want.casefold())}"})
    if "judgments" in props:
        n = props["judgments"]["minItems"]
        return json.dumps({"judgments": ["not enough"] + ["enough"] * (n - 1)})
    if "ratings" in props:
        n = props["ratings"]["minItems"]
        one = {"relevance": "relevant", "conciseness": "concise", "repetition": "not repetitive",
               "factuality": "not hallucinating", "politeness": "polite"}
        return json.dumps({"ratings": [one] * n})
    raise AssertionError(f"unexpected request: {job.json_schema}")


def _run(tmp_path, monkeypatch, fail=None, max_error_rate=0.2, **overrides):
    monkeypatch.chdir(tmp_path)
    _write_data(tmp_path)
    backend = ScriptedBackend(responder, fail)
    cfg = {"dataset": "data/utterances.csv", "catalog": "data/catalog.jsonl", "few_shot": "data/few_shot.jsonl",
           "ambiguous_dataset": "data/ambiguous.jsonl",
           "n_edit_train": 3, "n_edit_test": 1, "n_pair_train": 1, "n_pair_test": 1, "pair_sample_above": 0, "n_unambiguous_train": 99,
           "max_turns": 3, "n_test_unambiguous": 99, "n_test_ood": 5, "n_test_dropout": 2, "n_label_dropout": 2,
           **overrides}
    data = {"llm": {"cache_path": str(tmp_path / "cache.sqlite")}, "quality": {"max_error_rate": max_error_rate},
            "intents": cfg}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    params = load_params(path)
    assets = dg.load_assets_from_modules([intents])
    checks = build_checks({k for a in assets for k in a.keys})
    return dg.materialize(
        [*assets, *checks],
        resources={"io_manager": WarehouseIOManager(), "params": params, "llm": scripted_llm(params, backend)},
        raise_on_error=False)


def _read(tmp_path, name):
    return pl.read_parquet(tmp_path / f"assets/intents/{name}.parquet")


def test_intents_group_with_scripted_llm(tmp_path, monkeypatch):
    result = _run(tmp_path, monkeypatch)
    assert result.success
    checks = result.get_asset_check_evaluations()
    assert len(checks) == 10
    assert all(c.passed for c in checks), [(c.check_name, c.metadata) for c in checks if not c.passed]

    cat = _read(tmp_path, "intent_catalog")
    assert cat.height == 4 and cat["kept"].sum() == 3
    assert cat.filter(~pl.col("kept"))["reject_reason"][0].startswith("malformed JSON")

    utt, rej = _read(tmp_path, "intent_utterances"), _read(tmp_path, "intent_utterances_rejected")
    assert utt.height == 13 and int(utt["is_ood"].sum()) == 1
    assert utt.height + rej.height == 17
    reasons = sorted(rej["reason"].to_list())
    # io.records numbers CSV records by data row (the header is not a record): "where is my parcel" is record 1
    assert reasons[0].startswith("bad encoding") and reasons[1] == "duplicate of record 1"
    assert rej.columns == ["file", "record", "field", "reason", "raw"]
    assert set(rej["file"]) == {"data/utterances.csv"} and rej["record"].min() >= 2
    assert reasons[2] == "empty text" and reasons[3].startswith("unknown intent 'membership'")

    aq = _read(tmp_path, "ambiguous_queries")
    edits, pairs = aq.filter(pl.col("method") == "edit"), aq.filter(pl.col("method") == "intent_pair")
    assert edits.height == 4 and pairs.height == 4  # 3 train + 1 test edits; 2 pairs x 2 intents
    # the verifier refuses edits made from return_item utterances, and only those
    for r in edits.iter_rows(named=True):
        assert r["kept"] == (r["true_intent"] != "return_item")
        assert r["kept"] or r["reject_reason"] == "verifier: not ambiguous"
    assert set(pairs["split"]) == {"train", "test"} and pairs["kept"].all()
    provided = aq.filter(pl.col("method") == "provided").sort("query_id")
    assert provided["kept"].to_list() == [True, False]
    assert provided["reject_reason"][1] == "unknown true_intent 'fly'"

    sim = _read(tmp_path, "simulated_conversations")
    conv = sim.group_by("conversation_id").agg(pl.col("kind", "outcome", "true_intent", "n_assistant_turns",
                                                      "llm_calls").first())
    n_edit_train = edits.filter(pl.col("kept") & (pl.col("split") == "train")).height
    assert conv.filter(pl.col("kind") == "ambiguous").height == n_edit_train + 2 + 1  # edits, pair, provided
    assert conv.filter(pl.col("kind") == "unambiguous").height == 9  # every train utterance
    outcomes = dict(conv.group_by("outcome").len().iter_rows())
    assert outcomes == {"correct": n_edit_train + 1 + 7, "wrong_intent": 1, "max_turns": 3}
    pair_conv = conv.filter((pl.col("outcome") == "max_turns") & (pl.col("kind") == "ambiguous"))
    assert pair_conv["n_assistant_turns"].to_list() == [3, 3] and pair_conv["llm_calls"].to_list() == [5, 5]
    # an unambiguous utterance is a single-turn conversation: asking on it ends the conversation (no user reply)
    asked = conv.filter(pl.col("kind") == "unambiguous").filter(pl.col("outcome") != "correct")
    asked = asked.filter(pl.col("outcome") == "max_turns").row(0, named=True)
    assert (asked["n_assistant_turns"], asked["llm_calls"]) == (1, 1)
    assert conv.filter(pl.col("kind") == "unambiguous")["n_assistant_turns"].max() == 1

    sc = _read(tmp_path, "conversation_scores")
    per = sc.group_by("conversation_id").agg(pl.col("sdrs", "A", "R", "outcome", "kind").first())
    # edit conversations: ask without enough info (1), predict with enough (1); the question is rated 1 -> SDRS 1
    edit_conv = per.filter((pl.col("kind") == "ambiguous") & (pl.col("outcome") == "correct"))
    assert edit_conv["sdrs"].to_list() == [1.0] * (n_edit_train + 1) and edit_conv["R"].to_list() == [1.0] * (
        n_edit_train + 1)
    assert per.filter(pl.col("outcome") != "correct")["sdrs"].to_list() == [0.0] * 4
    # max-turns conversation: "not enough", then "enough" twice while still asking -> ars 1, 0, 0
    mt = sc.filter(pl.col("outcome") == "max_turns").sort("conversation_id", "assistant_turn")
    assert mt["ars"].to_list()[:3] == [1, 0, 0] and mt["A"][0] == pytest.approx(1 / 3)
    una = sc.filter(pl.col("kind") == "unambiguous")
    assert set(una.filter(pl.col("action") != "clarify")["info_source"]) == {"by_construction"}
    # the one unambiguous conversation with a clarifying turn is judged (Fig. 6 + Fig. 7); the scripted judge says
    # "not enough", so asking scores ARS 1, but the conversation ran out of turns: SDRS 0
    asked_turn = una.filter(pl.col("action") == "clarify")
    assert una["judge_calls"].sum() == 2 and asked_turn["judge_calls"].to_list() == [2]
    assert asked_turn["info_source"].to_list() == ["judge"]
    assert asked_turn["ars"].to_list() == [1] and asked_turn["sdrs"].to_list() == [0.0]

    tc = _read(tmp_path, "training_conversations")
    drop = tc.filter(pl.col("label_dropout"))
    assert drop.height == 2 and tc.height == conv.height + 2  # label dropout adds examples
    assert set(drop["dropout_source"]) <= set(conv["conversation_id"])
    for r in drop.iter_rows(named=True):
        assert r["true_intent"] not in r["candidate_intents"] and r["messages"][-1]["content"] == "out of domain"
        assert r["true_intent"] not in r["messages"][0]["content"].split("Intents (")[1].split("Reply with")[0]
    ranked = tc.filter(~pl.col("label_dropout") & pl.col("sdrs").is_not_null())
    k = math.ceil(ranked.height * 0.85)
    assert ranked.filter(pl.col("sdrs_rank") <= k).height == k
    # require_correct: no wrong / unfinished conversation is kept (label-dropout rows are rewritten, so they may be)
    assert not tc.filter((pl.col("outcome") != "correct") & ~pl.col("label_dropout"))["kept"].any()
    unfinished = tc.filter((pl.col("outcome") == "max_turns") & ~pl.col("label_dropout"))
    assert "no final prediction (outcome max_turns)" in set(unfinished["removed_reason"])
    lines = (tmp_path / "assets/intents/exports/training_conversations.jsonl").read_text().splitlines()
    assert len(lines) == int(tc["kept"].sum())
    first = json.loads(lines[0])
    assert list(first) == ["messages"] and first["messages"][0]["role"] == "system"
    multi = [json.loads(x)["messages"] for x in lines if len(json.loads(x)["messages"]) > 3]
    assert multi and [m["role"] for m in multi[0]] == ["system", "user", "assistant", "user", "assistant"]
    assert multi[0][2]["content"] == "Is it about tracking or cancelling?"  # plain-text targets, not JSON

    sweep = _read(tmp_path, "keep_percentile_sweep")
    assert sweep["percentile"].to_list() == [100.0, 90.0, 85.0, 80.0, 75.0, 65.0]
    assert sweep["n_kept"].to_list() == sorted(sweep["n_kept"].to_list(), reverse=True)

    ev = _read(tmp_path, "intent_eval").row(0, named=True)
    assert ev["subject"] == "smollm2"
    assert ev["n_unambiguous"] == 3 and ev["ic_accuracy"] == 1.0
    assert ev["n_ood"] == 1 and ev["ood_accuracy"] == 1.0  # it asked once, then said out of domain
    ood = _read(tmp_path, "eval_conversations").filter(pl.col("kind") == "ood")
    assert ood["speaker"].to_list() == ["user", "assistant", "user", "assistant"]
    assert ev["mean_turns_ood"] == pytest.approx((2 + 1 + 1) / 3)
    assert ev["source"] == "intents/eval_conversations" and ev["model"]
    assert ev["n_ood_dropout"] == 2 and ev["ood_dropout_accuracy"] == 1.0
    n_amb = ev["n_ambiguous"]
    assert n_amb == edits.filter(pl.col("kept") & (pl.col("split") == "test")).height + 2
    # SDRS: 3 unambiguous at 1, test edits at 1, the two pair conversations at 0
    assert ev["sdrs"] == pytest.approx((3 + n_amb - 2) / (3 + n_amb))
    assert ev["rel"] == 1.0 and ev["pol"] == 1.0


def test_llm_failures_are_rows(tmp_path, monkeypatch):
    """The user simulator fails every call: ambiguous conversations end as user_error and are not scored."""

    def fail(job):
        return "RuntimeError: down" if "reply" in (job.json_schema or {}).get("properties", {}) else None

    # every user_simulator request fails: its error budget would stop the group at the default 0.2
    (tmp_path / "blocked").mkdir()
    blocked = _run(tmp_path / "blocked", monkeypatch, fail=fail)
    by_check = {c.check_name: c for c in blocked.get_asset_check_evaluations()}
    assert "user_simulator" in by_check["gx_simulated_conversations"].metadata["results"].value[
        "error budget per role"]["over_budget"]
    result = _run(tmp_path, monkeypatch, fail=fail, max_error_rate=1.0)  # let the failed rows flow downstream
    sim = _read(tmp_path, "simulated_conversations")
    amb = sim.filter(pl.col("kind") == "ambiguous")
    assert set(amb["outcome"]) == {"user_error"}
    failed = amb.filter((pl.col("speaker") == "user") & (pl.col("status") == "llm_error"))
    assert failed.height == amb["conversation_id"].n_unique()  # one failed user row per conversation, kept
    sc = _read(tmp_path, "conversation_scores")
    assert set(sc.filter(pl.col("kind") == "ambiguous")["score_status"]) == {"not_scored"}
    tc = _read(tmp_path, "training_conversations")
    assert (tc.filter(pl.col("outcome") == "user_error")["removed_reason"] == "no SDRS (not_scored)").all()
    assert result.success
