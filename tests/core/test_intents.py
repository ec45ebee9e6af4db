"""core/intents/ and the SDRS / ARS metrics on hand-computed cases (no Dagster, no model)."""

import json

import polars as pl
import pytest

from dagster_project.config import IntentsConfig
from dagster_project.core.intents.ambiguous import (
    generate_edits,
    generate_pairs,
    validate_provided_ambiguous,
    verify_edits,
)
from dagster_project.core.intents.assistant import assistant_schema, parse_assistant_reply, render_reply
from dagster_project.core.intents.catalog import OOD_TARGET, Catalog, Intent, validate_catalog
from dagster_project.core.intents.curation import (
    keep_percentile_sweep,
    label_dropout_sources,
    top_percentile_cut,
    training_conversations,
    trl_rows,
)
from dagster_project.core.intents.evaluation import intent_eval_table
from dagster_project.core.intents.metrics import QUALITY_SCALES, ambiguity_resolution_score, sdrs, turn_quality
from dagster_project.core.intents.scoring import (
    info_task,
    parse_info_judgments,
    parse_quality_ratings,
    quality_task,
    score_conversations,
)
from dagster_project.core.intents.simulation import USER, ConversationSeed, simulate_conversations
from dagster_project.core.intents.utterances import validate_utterances
from dagster_project.io.formats.intents import read_utterances
from dagster_project.io.records import InputFileError, Record
from dagster_project.llm.chat import ChatResult

NAMES = ["track_order", "cancel_order", "return_item"]


# --------------------------------------------------------------------------- ARS (Appendix D)

@pytest.mark.parametrize("action,enough,expected", [
    ("intent", True, 1), ("intent", False, 0),          # predicting: right only with enough information
    ("clarify", True, 0), ("clarify", False, 1),        # asking: right only without it
    ("out_of_domain", True, 1), ("out_of_domain", False, 0),  # "out of domain" is a prediction
    ("invalid", True, 0), ("invalid", False, 0),        # an unusable reply is never right
])
def test_ars_table(action, enough, expected):
    assert ambiguity_resolution_score(action, enough) == expected


def test_turn_quality_is_the_product_of_the_five_ratings():
    v = {"relevance": 0.5, "conciseness": 1.0, "repetition_avoidance": 0.5, "factuality": 1.0, "politeness": 1.0}
    assert turn_quality(v) == 0.25
    assert turn_quality({**v, "politeness": 0.0}) == 0.0
    assert QUALITY_SCALES["relevance"] == {"relevant": 1.0, "moderately relevant": 0.5, "not relevant": 0.0}


# --------------------------------------------------------------------------- SDRS (§2.3)

def test_sdrs_single_turn_is_A():
    assert sdrs([1], None, correct=True) == {"A": 1.0, "R": None, "SDRS": 1.0}
    # asked nothing but predicted without enough information: A = 0, so SDRS = 0 although correct
    assert sdrs([0], None, correct=True)["SDRS"] == 0.0


def test_sdrs_multi_turn_hand_computed():
    # 3 turns: ask (1), ask when it should have predicted (0), predict (1) -> A = 2/3
    # quality of the two non-final turns: 1 and 0.25 -> R = 0.625; alpha 0.5 -> SDRS = 0.5*2/3 + 0.5*0.625
    out = sdrs([1, 0, 1], [1.0, 0.25], correct=True, alpha=0.5)
    assert out["A"] == pytest.approx(2 / 3) and out["R"] == pytest.approx(0.625)
    assert out["SDRS"] == pytest.approx(0.5 * 2 / 3 + 0.5 * 0.625)
    assert sdrs([1, 1], [0.5], correct=True, alpha=0.8)["SDRS"] == pytest.approx(0.8 * 1 + 0.2 * 0.5)


def test_sdrs_zero_for_wrong_intent_and_max_turns():
    wrong = sdrs([1, 1], [1.0], correct=False)
    assert wrong["SDRS"] == 0.0 and wrong["A"] == 1.0  # A and R are still reported
    assert sdrs([1, 1, 1], [1.0, 1.0], correct=False, max_turns_reached=True)["SDRS"] == 0.0
    assert sdrs([1, 1], [1.0], correct=True, max_turns_reached=True)["SDRS"] == 0.0


def test_sdrs_missing_inputs_and_bad_shapes():
    assert sdrs([1, None], [1.0], correct=True)["SDRS"] is None  # judge failed on a turn
    assert sdrs([1, 1], [None], correct=True)["SDRS"] is None
    assert sdrs([1, None], [1.0], correct=False)["SDRS"] == 0.0  # a wrong intent needs no judge
    with pytest.raises(ValueError, match="non-final"):
        sdrs([1, 1, 1], [1.0], correct=True)
    with pytest.raises(ValueError):
        sdrs([], None, correct=True)


# --------------------------------------------------------------------------- parsing assistant replies

@pytest.mark.parametrize("raw,action,text", [
    ("track_order", "intent", "track_order"),
    ("  Track Order. ", "intent", "track_order"),
    ("Intent: cancel-order", "intent", "cancel_order"),
    ('"return_item"', "intent", "return_item"),
    ("out of domain", "out_of_domain", "out of domain"),
    ("Out_of_domain.", "out_of_domain", "out of domain"),
    ("Do you want to track the order or cancel it?", "clarify", "Do you want to track the order or cancel it?"),
    ("The intent is track_order.", "intent", "track_order"),  # one candidate named, no question mark
    ("I think track_order or cancel_order", "invalid", "I think track_order or cancel_order"),
    ("blah blah", "invalid", "blah blah"),
    ("", "invalid", ""),
])
def test_parse_assistant_plain_text(raw, action, text):
    r = parse_assistant_reply(raw, NAMES)
    assert (r.action, r.text) == (action, text)
    assert (r.error is None) == (action != "invalid")


def test_parse_assistant_json():
    j = json.dumps
    assert parse_assistant_reply(j({"action": "predict_intent", "intent": "return_item", "question": ""}),
                                   NAMES).intent == "return_item"
    q = parse_assistant_reply(j({"action": "ask_clarifying_question", "intent": "none", "question": " Which? "}), NAMES)
    assert (q.action, q.text) == ("clarify", "Which?")
    assert parse_assistant_reply(j({"action": "out_of_domain", "intent": "none", "question": ""}),
                                   NAMES).action == "out_of_domain"
    # an intent outside the candidate list (e.g. after label dropout), an empty question, an unknown action
    assert parse_assistant_reply(j({"action": "predict_intent", "intent": "pay", "question": ""}), NAMES).action \
        == "invalid"
    assert parse_assistant_reply(j({"action": "ask_clarifying_question", "intent": "none", "question": ""}),
                                   NAMES).error == "empty clarifying question"
    assert parse_assistant_reply(j({"action": "dance"}), NAMES).action == "invalid"
    assert parse_assistant_reply('{"action": "predict_intent", "intent": "track', NAMES).action == "invalid"


def test_render_reply_round_trips():
    for raw in ("track_order", "Which one?", "out of domain"):
        r = parse_assistant_reply(raw, NAMES)
        assert parse_assistant_reply(render_reply(r, structured=True), NAMES) == r
        assert render_reply(r, structured=False) == r.text


# --------------------------------------------------------------------------- input files and quarantine

def test_read_records_and_quarantine(tmp_path):
    f = tmp_path / "u.jsonl"
    f.write_bytes(b'{"text": "where is my parcel", "intent": "track_order"}\n'
                  b'{"text": "cancel it", "intent": "cancel_order", "split": "test"}\n'
                  b'not json\n'
                  b'[1, 2]\n'
                  b'{"text": "", "intent": "track_order"}\n'
                  b'{"text": "bad \xff byte", "intent": "track_order"}\n'
                  b'{"text": "WHERE is  my parcel", "intent": "cancel_order"}\n'
                  b'{"text": "upgrade", "intent": "membership"}\n'
                  b'{"text": "fly me to Rome", "intent": "out_of_domain"}\n'
                  b'{"text": "return it", "intent": "return_item", "split": "holdout"}\n'
                  b'{"text": "send it back", "intent": "return_item"}\n'
                  b'{"text": "shoes back please"}\n')
    recs = read_utterances(f)
    kept, quarantine = validate_utterances(recs, str(f), NAMES,
                                           IntentsConfig(ood_label="out_of_domain", test_fraction=0.0, seed=0))
    rej = quarantine.frame()
    assert rej.columns == ["file", "record", "field", "reason", "raw"] and set(rej["file"]) == {f.as_posix()}
    assert kept["text"].to_list() == ["where is my parcel", "cancel it", "fly me to Rome", "send it back"]
    assert kept["split"].to_list() == ["train", "test", "train", "train"]
    assert kept["is_ood"].to_list() == [False, False, True, False]
    reasons = dict(zip(rej["record"].to_list(), rej["reason"].to_list()))
    assert reasons[3].startswith("malformed JSON") and "got list" in reasons[4]
    assert reasons[5] == "empty text"
    assert reasons[6].startswith("bad encoding")
    assert reasons[7] == "duplicate of record 1"
    assert reasons[8].startswith("unknown intent 'membership'")
    assert reasons[10].startswith("unknown split 'holdout'")
    assert reasons[12] == "missing intent"
    fields = dict(zip(rej["record"].to_list(), rej["field"].to_list()))
    assert (fields[3], fields[5], fields[8], fields[10]) == ("<record>", "text", "intent", "split")
    assert kept.height + rej.height == 12  # nothing dropped silently


def test_missing_field_names_file_and_field(tmp_path):
    f = tmp_path / "u.csv"
    f.write_text("utterance,label\nhi,track_order\n")
    with pytest.raises(InputFileError, match=r"u\.csv: no field 'text'.*utterance.*\(params: intents\.dataset\)"):
        read_utterances(f)
    with pytest.raises(InputFileError, match="file not found"):
        read_utterances(tmp_path / "nope.csv")
    with pytest.raises(InputFileError, match="unsupported file type"):
        (tmp_path / "x.txt").write_text("a")
        read_utterances(tmp_path / "x.txt")


def test_split_assignment_is_seeded_and_stratified():
    recs = [Record("x", i + 1, {"text": f"t{i}", "intent": NAMES[i % 3]}) for i in range(30)]
    cfg = IntentsConfig(ood_label="ood", test_fraction=0.3, seed=7)
    a, _ = validate_utterances(recs, "x", NAMES, cfg)
    b, _ = validate_utterances(recs, "x", NAMES, cfg)
    assert a["split"].to_list() == b["split"].to_list()
    per = a.filter(pl.col("split") == "test").group_by("intent").len()
    assert dict(per.iter_rows()) == {n: 3 for n in NAMES}  # round(0.3 * 10) per intent


def test_catalog_validation(tmp_path):
    recs = [Record("c.jsonl", i, d) for i, d in enumerate([
        {"name": "track_order", "description": "d", "examples": "a | b"}, {"name": "Track-Order"},
        {"description": "no name"}, {"name": "out of domain"}, {"name": "cancel_order", "examples": [1, 2]},
        {"name": "return_item"}], 1)]
    cat = validate_catalog(recs, "c.jsonl", "out_of_domain")
    assert cat["kept"].to_list() == [True, False, False, False, False, True]
    assert cat["examples"][0].to_list() == ["a", "b"]
    assert cat["reject_reason"][1].startswith("duplicate intent name")
    assert Catalog.from_frame(cat).names == ["track_order", "return_item"]
    with pytest.raises(InputFileError, match="c.jsonl: no usable intent"):
        validate_catalog([Record("c.jsonl", 1, {"description": "x"})], "c.jsonl", "ood")


# --------------------------------------------------------------------------- top-percentile cut and sweep

def _conv(sdrs_values, outcomes=None):
    n = len(sdrs_values)
    return pl.DataFrame({"conversation_id": [f"c{i}" for i in range(n)], "sdrs": sdrs_values,
                         "outcome": outcomes or ["correct"] * n, "score_status": ["ok"] * n},
                        schema_overrides={"sdrs": pl.Float64})


def test_top_percentile_cut_counts_and_ties():
    # 7 scored: ceil(7 * 0.85) = 6 kept. Sorted: c0 .9, c1 .8, c2 .5, c3 .5, c4 .5, c5 .5, c6 .1 -> c0..c5 kept
    out = top_percentile_cut(_conv([0.9, 0.8, 0.5, 0.5, 0.5, 0.5, 0.1]), 85)
    assert out.filter(pl.col("kept"))["conversation_id"].to_list() == ["c0", "c1", "c2", "c3", "c4", "c5"]
    assert out["cut_sdrs"][0] == 0.5
    assert out.filter(~pl.col("kept"))["removed_reason"][0] == "below the top 85% by SDRS (cut 0.500)"
    # 65%: ceil(4.55) = 5 kept; the four 0.5 ties are split by conversation_id: c2, c3, c4 in, c5 out
    out = top_percentile_cut(_conv([0.9, 0.8, 0.5, 0.5, 0.5, 0.5, 0.1]), 65)
    kept = out.filter(pl.col("kept"))["conversation_id"].to_list()
    assert kept == ["c0", "c1", "c2", "c3", "c4"]
    c5 = out.filter(pl.col("conversation_id") == "c5").row(0, named=True)
    assert c5["removed_reason"].startswith("tied at the cut SDRS 0.500") and c5["sdrs_rank"] == 6


def test_cut_require_correct_and_unscored():
    conv = _conv([1.0, 0.0, 0.7, None], ["correct", "wrong_intent", "correct", "correct"])
    conv = conv.with_columns(score_status=pl.Series(["ok", "ok", "ok", "judge_parse_error"]))
    out = top_percentile_cut(conv, 100, require_correct=True).sort("conversation_id")
    assert out["kept"].to_list() == [True, False, True, False]
    assert out["removed_reason"].to_list()[1] == "final outcome wrong_intent (require_correct)"
    assert out["removed_reason"].to_list()[3] == "no SDRS (judge_parse_error)"
    assert top_percentile_cut(conv, 100, require_correct=False).sort("conversation_id")["kept"].to_list() \
        == [True, True, True, False]


def test_keep_percentile_sweep_table4_layout():
    conv = _conv([1.0, 0.8, 0.6, 0.4, 0.2, 0.0, 0.0, 0.0, 0.0, 0.0])
    t = keep_percentile_sweep(conv, [100, 90, 85, 65])
    assert t["n_kept"].to_list() == [10, 9, 9, 7]  # ceil(10 * p / 100)
    assert t["mean_sdrs_kept"].to_list() == pytest.approx([0.3, 3.0 / 9, 3.0 / 9, 3.0 / 7])
    assert t["cut_sdrs"].to_list() == [0.0, 0.0, 0.0, 0.0]


# --------------------------------------------------------------------------- label dropout (§2.2.1)

def test_label_dropout_sources_count_and_seed():
    ids = [f"c{i}" for i in range(10)]
    assert len(label_dropout_sources(ids, 3, seed=3)) == 3 and label_dropout_sources(ids, 3, 3) == \
        label_dropout_sources(list(reversed(ids)), 3, 3)  # order of the input does not matter
    assert label_dropout_sources(ids, 50, seed=0) == ids and label_dropout_sources(ids, 0, seed=0) == []
    assert len({tuple(label_dropout_sources(ids, 3, seed=s)) for s in range(5)}) > 1  # the seed matters


def _turns_for(seeds_and_msgs):
    frames = []
    for seed, msgs in seeds_and_msgs:
        rows = [{"conversation_id": seed.conversation_id, "message_index": i, "speaker": sp, "text": tx,
                 "status": "ok"} for i, (sp, tx) in enumerate(msgs)]
        frames.append(pl.DataFrame(rows).with_columns(
            candidate_intents=pl.lit(list(seed.candidates), pl.List(pl.Utf8))))
    return pl.concat(frames)


def test_training_conversations_label_dropout_removes_the_true_intent():
    cat = Catalog(tuple(Intent(n, f"about {n}", (f"ex {n}",)) for n in NAMES))
    una = [ConversationSeed(f"u{i}", "unambiguous", f"q{i}", f"text {i}", f"text {i}", NAMES[i % 3],
                              tuple(NAMES), "train") for i in range(4)]
    amb = ConversationSeed("a0", "ambiguous", "qa", "help", "cancel it", "cancel_order", tuple(NAMES), "train")
    turns = _turns_for([(s, [("user", s.first_message), ("assistant", s.true_intent)]) for s in una]
                       + [(amb, [("user", "help"), ("assistant", "Which?"), ("user", "cancel"),
                                 ("assistant", "cancel_order")])])
    conv = pl.DataFrame({"conversation_id": ["u0", "u1", "u2", "u3", "a0"],
                         "kind": ["unambiguous"] * 4 + ["ambiguous"], "method": [None] * 4 + ["edit"],
                         "split": ["train"] * 5, "query_id": ["q0", "q1", "q2", "q3", "qa"],
                         "true_intent": [s.true_intent for s in una] + ["cancel_order"],
                         "outcome": ["correct"] * 5, "n_turns": [1, 1, 1, 1, 2], "sdrs": [1.0, 1.0, 1.0, 1.0, 0.9],
                         "score_status": ["ok"] * 5})
    out = training_conversations(turns, conv, cat, [], IntentsConfig(keep_percentile=100, require_correct=True,
                                                                     n_label_dropout=2, seed=1, examples_per_intent=1))
    drop = out.filter(pl.col("label_dropout"))
    assert drop.height == 2 and drop["kept"].all() and out.height == 7  # added, not rewritten in place
    for r in drop.iter_rows(named=True):
        system = r["messages"][0]["content"]
        assert f"- {r['true_intent']}:" not in system  # really absent from the candidate list
        assert all(f"- {n}:" in system for n in r["candidate_intents"])
        assert [m["role"] for m in r["messages"]] == ["system", "user", "assistant"]
        assert r["messages"][-1]["content"] == OOD_TARGET and r["target"] == OOD_TARGET
    a0 = out.filter(pl.col("conversation_id") == "a0").row(0, named=True)
    assert [m["role"] for m in a0["messages"]] == ["system", "user", "assistant", "user", "assistant"]
    assert a0["messages"][-1]["content"] == "cancel_order" and a0["kept"]
    lines = trl_rows(out)
    assert len(lines) == 7 and all(list(x) == ["messages"] for x in lines)


# --------------------------------------------------------------------------- simulation and scoring with a script

def _catalog():
    return Catalog(tuple(Intent(n, f"about {n}", ()) for n in NAMES))


def _script(answers):
    """chat() that answers each role's requests from a list of texts, in order."""
    queues = {role: list(texts) for role, texts in answers.items()}
    calls = []

    def chat(role, reqs):
        calls.append((role, len(reqs)))
        return [ChatResult(texts=[queues[role].pop(0)], model="m") for _ in reqs]

    return chat, calls


def test_simulation_stops_at_prediction_or_max_turns():
    ask = json.dumps({"action": "ask_clarifying_question", "intent": "none", "question": "Which?"})
    pred = json.dumps({"action": "predict_intent", "intent": "cancel_order", "question": ""})
    seeds = [ConversationSeed("a", "ambiguous", "qa", "help", "cancel my order", "cancel_order", tuple(NAMES),
                                "train", "edit", max_turns=2),
             ConversationSeed("b", "ambiguous", "qb", "help", "track it", "track_order", tuple(NAMES), "train",
                                "edit", max_turns=2)]
    # turn 1: both ask; users reply; turn 2: a predicts cancel_order (correct), b asks again (max turns)
    chat, calls = _script({"assistant": [ask, ask, pred, ask],
                           "user_simulator": ['{"reply": "cancel it"}', '{"reply": "tracking"}']})
    t = simulate_conversations(seeds, chat, _catalog(), [], IntentsConfig())
    assert calls == [("assistant", 2), ("user_simulator", 2), ("assistant", 2)]  # one batch per turn
    conv = {r["conversation_id"]: r for r in t.group_by("conversation_id").agg(
        pl.col("outcome", "n_assistant_turns", "llm_calls", "final_prediction").first()).to_dicts()}
    assert conv["a"]["outcome"] == "correct" and conv["a"]["final_prediction"] == "cancel_order"
    assert conv["b"]["outcome"] == "max_turns" and conv["b"]["final_prediction"] is None
    assert conv["a"]["llm_calls"] == 3 and conv["b"]["n_assistant_turns"] == 2
    a = t.filter(pl.col("conversation_id") == "a").sort("message_index")
    assert a["speaker"].to_list() == ["user", "assistant", "user", "assistant"]
    assert a["text"].to_list() == ["help", "Which?", "cancel it", "cancel_order"]

    # scoring: judge says not enough then enough for both; every question rated top except b's 2nd (moderate)
    top = {"relevance": "relevant", "conciseness": "concise", "repetition": "not repetitive",
           "factuality": "not hallucinating", "politeness": "polite"}
    judge, jcalls = _script({"judge": [
        json.dumps({"judgments": ["not enough", "enough"]}), json.dumps({"judgments": ["not enough", "enough"]}),
        json.dumps({"ratings": [top]}), json.dumps({"ratings": [top, {**top, "relevance": "moderately relevant"}]})]})
    s = score_conversations(t, judge, _catalog(), IntentsConfig(alpha=0.5))
    assert jcalls == [("judge", 2), ("judge", 2)]
    sa = s.filter(pl.col("conversation_id") == "a").sort("assistant_turn")
    assert sa["ars"].to_list() == [1, 1] and sa["A"][0] == 1.0 and sa["R"][0] == 1.0 and sa["sdrs"][0] == 1.0
    sb = s.filter(pl.col("conversation_id") == "b").sort("assistant_turn")
    assert sb["ars"].to_list() == [1, 0]  # asking once it was clear is wrong
    assert sb["relevance"].to_list() == [1.0, 0.5] and sb["sdrs"][0] == 0.0  # max turns
    assert sb["A"][0] == 0.5 and sb["R"][0] == 1.0  # R over the one non-final turn


def test_simulation_failures_are_rows():
    seeds = [ConversationSeed("a", "ambiguous", "qa", "help", "cancel", "cancel_order", tuple(NAMES), "train"),
             ConversationSeed("b", "unambiguous", "qb", "xyz", "xyz", "track_order", tuple(NAMES), "train")]
    ask = json.dumps({"action": "ask_clarifying_question", "intent": "none", "question": "Which?"})

    def chat(role, reqs):
        if role == "assistant":
            return [ChatResult(texts=[ask], model="m"), ChatResult(texts=["garbage"], model="m")][:len(reqs)]
        return [ChatResult(error="RuntimeError: down", model="m") for _ in reqs]

    t = simulate_conversations(seeds, chat, _catalog(), [], IntentsConfig())
    out = dict(t.group_by("conversation_id").agg(pl.col("outcome").first()).iter_rows())
    assert out == {"a": "user_error", "b": "invalid_reply"}
    assert t.filter(pl.col("conversation_id") == "a")["status"].to_list() == ["ok", "ok", "llm_error"]
    judge, _ = _script({"judge": []})
    s = score_conversations(t, judge, _catalog(), IntentsConfig(alpha=0.5)).sort("conversation_id")
    assert s["score_status"].to_list() == ["not_scored", "ok"]
    assert s["sdrs"].to_list() == [None, 0.0]  # invalid reply: scored, SDRS 0; A from by-construction info: 0
    assert s["ars"].to_list() == [None, 0]


def test_judge_output_parsing():
    assert parse_info_judgments('{"judgments": ["not enough", "Enough information"]}', 2) == ([False, True], None)
    assert parse_info_judgments('{"judgments": ["enough"]}', 2)[1] == "expected 2 judgments, got 1"
    assert "neither" in parse_info_judgments('{"judgments": ["maybe"]}', 1)[1]
    ok = {"relevance": "Moderately Relevant", "conciseness": "not concise", "repetition": "somewhat repetitive",
          "factuality": "hallucinating", "politeness": "polite"}
    vals, err = parse_quality_ratings(json.dumps({"ratings": [ok]}), 1)
    assert err is None and vals == [{"relevance": 0.5, "conciseness": 0.0, "repetition_avoidance": 0.5,
                                     "factuality": 0.0, "politeness": 1.0}]
    assert parse_quality_ratings(json.dumps({"ratings": [{**ok, "politeness": "rude"}]}), 1)[0] is None


def _replies(texts):
    """chat() answering every request with the next text; also returns the list of requests it was sent."""
    queue, sent = list(texts), []

    def chat(role, reqs):
        sent.extend(reqs)
        return [ChatResult(texts=[queue.pop(0)], model="m") for _ in reqs]

    return chat, sent


def _old_edit_schema(names):
    """The hand-written schema the edit step always sent (cache key and grammar: must not change)."""
    reason = {"type": "string", "maxLength": 80}
    return {"type": "object", "properties": {
        "modified_query": {"type": "string", "minLength": 5, "maxLength": 160},
        "potential_intents": {"type": "array", "minItems": 2, "maxItems": 3, "items": {
            "type": "object", "properties": {"intent": {"type": "string", "enum": names}, "reason": reason},
            "required": ["intent", "reason"]}}}, "required": ["modified_query", "potential_intents"]}


def _old_verify_schema(names):
    return {"type": "object", "properties": {
        "ambiguous": {"type": "boolean"},
        "fitting_intents": {"type": "array", "maxItems": 3, "items": {"type": "string", "enum": names}},
        "reason": {"type": "string", "maxLength": 80}}, "required": ["ambiguous", "fitting_intents", "reason"]}


def test_edit_parsing_rejects_with_reasons():
    src = pl.DataFrame({"utterance_id": ["u1"] * 5, "text": ["cancel my order"] * 5, "intent": ["cancel_order"] * 5,
                        "split": ["train"] * 5})
    replies = [
        {"modified_query": "help with my order", "potential_intents": [
            {"intent": "cancel_order", "reason": "a"}, {"intent": "track_order", "reason": "b"}]},
        {"modified_query": "help", "potential_intents": [{"intent": "cancel_order", "reason": "a"}]},
        {"modified_query": "help", "potential_intents": [{"intent": "track_order", "reason": "a"},
                                                         {"intent": "return_item", "reason": "b"}]},
        {"modified_query": "Cancel my  order", "potential_intents": [{"intent": "cancel_order", "reason": "a"},
                                                                     {"intent": "track_order", "reason": "b"}]},
        {"modified_query": "x"},
    ]
    chat, sent = _replies([json.dumps(r) for r in replies])
    out = generate_edits(chat, src, _catalog(), IntentsConfig(examples_per_intent=1, generation_temperature=0.7))
    assert [(r.sampling.temperature, r.sampling.seed, r.sampling.max_tokens) for r in sent] == [
        (0.7, i, 220) for i in range(5)]
    assert all(r.json_schema == _old_edit_schema(NAMES) for r in sent)  # the grammar the model always got
    assert out["kept"].to_list() == [True, False, False, False, False]
    assert out["reject_reason"].to_list()[1:4] == ["fewer than two potential intents",
                                                    "the true intent is not among the potential intents",
                                                    "query unchanged"]
    assert out["status"].to_list()[4] == "parse_error"
    chat, sent = _replies([json.dumps({"ambiguous": True, "fitting_intents": ["cancel_order"], "reason": "r"})])
    verified = verify_edits(chat, out.head(1), _catalog())
    assert sent[0].json_schema == _old_verify_schema(NAMES)
    assert (sent[0].sampling.temperature, sent[0].sampling.max_tokens) == (0.0, 120)
    assert verified["kept"].to_list() == [False]
    assert verified["reject_reason"].to_list() == ["verifier: fewer than two fitting intents"]
    two = out.head(1).vstack(out.head(1)).vstack(out.head(1))
    verdicts = [{"ambiguous": True, "fitting_intents": ["Track Order", "cancel_order"], "reason": "r"},
                {"ambiguous": True, "fitting_intents": ["track_order", "return_item"], "reason": "r"},
                {"ambiguous": False, "fitting_intents": ["track_order", "cancel_order"], "reason": "clear"}]
    v = verify_edits(_replies([json.dumps(x) for x in verdicts])[0], two, _catalog())
    assert v["kept"].to_list() == [True, False, False]
    assert v["fitting_intents"][0].to_list() == ["track_order", "cancel_order"]
    assert v["reject_reason"].to_list() == [None, "verifier: the true intent is not among the fitting intents",
                                            "verifier: not ambiguous"]


def test_simulation_in_plain_text_mode():
    """structured_output false: no JSON schema is sent and replies follow the paper's plain protocol."""
    seeds = [ConversationSeed("a", "ambiguous", "qa", "help", "cancel my order", "cancel_order", tuple(NAMES),
                                "train", "edit", max_turns=3)]
    chat, calls = _script({"assistant": ["Do you want to cancel or track it?", "Cancel_Order"],
                           "user_simulator": ['{"reply": "cancel it"}']})
    seen = []

    def spy(role, reqs):
        seen.extend(r.json_schema for r in reqs if role == "assistant")
        return chat(role, reqs)

    t = simulate_conversations(seeds, spy, _catalog(), [], IntentsConfig(structured_output=False))
    assert seen == [None, None]
    assert t["outcome"][0] == "correct"
    asst = t.filter(pl.col("speaker") == "assistant")
    assert asst["action"].to_list() == ["clarify", "intent"] and asst["predicted_intent"][1] == "cancel_order"


def test_intent_eval_table_hand_computed():
    def conv(cid, kind, outcome, n):
        return [{"subject": "s", "conversation_id": cid, "kind": kind, "outcome": outcome, "n_assistant_turns": n,
                 "llm_calls": n}]
    turns = pl.DataFrame(conv("u1", "unambiguous", "correct", 1) + conv("u2", "unambiguous", "wrong_intent", 1)
                         + conv("u3", "unambiguous", "llm_error", 1) + conv("a1", "ambiguous", "correct", 2)
                         + conv("o1", "ood", "correct", 1) + conv("o2", "ood", "wrong_intent", 1)
                         + conv("d1", "ood_dropout", "max_turns", 1))
    scores = pl.DataFrame([
        {"subject": "s", "conversation_id": "u1", "kind": "unambiguous", "assistant_turn": 1, "sdrs": 1.0, "ars": 1,
         "relevance": None, "conciseness": None, "repetition_avoidance": None, "factuality": None, "politeness": None},
        {"subject": "s", "conversation_id": "u2", "kind": "unambiguous", "assistant_turn": 1, "sdrs": 0.0, "ars": 1,
         "relevance": None, "conciseness": None, "repetition_avoidance": None, "factuality": None, "politeness": None},
        {"subject": "s", "conversation_id": "a1", "kind": "ambiguous", "assistant_turn": 1, "sdrs": 0.5, "ars": 0,
         "relevance": 0.5, "conciseness": 1.0, "repetition_avoidance": 1.0, "factuality": 1.0, "politeness": 0.0},
        {"subject": "s", "conversation_id": "a1", "kind": "ambiguous", "assistant_turn": 2, "sdrs": 0.5, "ars": 1,
         "relevance": None, "conciseness": None, "repetition_avoidance": None, "factuality": None, "politeness": None},
    ]).with_columns(score_status=pl.lit("ok"))
    r = intent_eval_table(turns, scores).row(0, named=True)
    assert r["ic_accuracy"] == 0.5 and r["n_unambiguous"] == 2 and r["excluded"] == 1  # the llm_error is excluded
    assert r["sdrs"] == pytest.approx(1.5 / 3)  # per conversation, not per turn
    assert r["ars"] == pytest.approx(3 / 4)  # per assistant turn
    assert (r["rel"], r["pol"]) == (0.5, 0.0)
    assert r["ood_accuracy"] == 0.5 and r["ood_dropout_accuracy"] == 0.0 and r["ambiguous_accuracy"] == 1.0
    assert r["mean_turns_ood"] == 1.0 and r["mean_turns_ambiguous"] == 2.0


def test_lenient_json_and_provided_ambiguous_queries():
    lenient = USER.parse('{"reply": "line one\nline two"}')  # a raw newline inside a JSON string
    assert lenient.value.reply == "line one\nline two" and lenient.repaired
    assert USER.parse("{oops").status == "parse_error"
    recs = [Record("a.jsonl", i, d) for i, d in enumerate([
        {"ambiguous_query": "help", "unambiguous_query": "cancel it", "true_intent": "Cancel-Order",
         "candidate_intents": "cancel_order|track_order", "split": "test"},
        {"ambiguous_query": "help", "unambiguous_query": "cancel it", "true_intent": "return_item",
         "candidate_intents": ["cancel_order", "track_order"]},
        {"ambiguous_query": "help", "unambiguous_query": "", "true_intent": "return_item",
         "candidate_intents": ["cancel_order", "return_item"]},
        {"ambiguous_query": "help", "unambiguous_query": "x", "true_intent": "return_item",
         "candidate_intents": ["return_item", "dance"]}], 1)]
    out = validate_provided_ambiguous(recs, NAMES)
    assert out["kept"].to_list() == [True, False, False, False]
    assert out["true_intent"][0] == "cancel_order" and out["split"][0] == "test"
    assert out["reject_reason"].to_list()[1:] == ["true_intent is not among candidate_intents",
                                                  "missing field 'ambiguous_query' or 'unambiguous_query'",
                                                  "candidate_intents must list at least two catalogue intents"]


# --------------------------------------------------------------------------- added in the issue #8 audit

def test_intent_pair_parsing_two_rows_per_pair():
    plan = pl.DataFrame({"pair_id": ["pair-train-000", "pair-test-001", "pair-test-002"],
                         "split": ["train", "test", "test"], "intent_a": ["cancel_order"] * 3,
                         "intent_b": ["track_order"] * 3})
    res = [ChatResult(texts=[json.dumps({"ambiguous_query": "Something about my  order",
                                         "query_for_a": "Cancel my order", "query_for_b": "Where is my order"})],
                      model="m"),
           ChatResult(texts=[json.dumps({"ambiguous_query": "my order", "query_for_a": "My order",
                                         "query_for_b": "where is it"})], model="m"),
           ChatResult(error="RuntimeError: down", model="m")]
    sent = []

    def chat(role, reqs):
        sent.extend(reqs)
        return res[:len(reqs)]

    out = generate_pairs(chat, plan, _catalog(), 0.7, seed=5).sort("query_id")
    pair_schema = {"type": "object", "properties": {
        k: {"type": "string", "minLength": 5, "maxLength": 120} for k in ("ambiguous_query", "query_for_a",
                                                                          "query_for_b")},
        "required": ["ambiguous_query", "query_for_a", "query_for_b"]}
    assert [r.sampling.seed for r in sent] == [5, 6, 7] and all(r.json_schema == pair_schema for r in sent)
    assert out.height == 6  # two rows per pair, failures included
    ok = out.filter(pl.col("group_id") == "pair-train-000").sort("query_id")
    assert ok["query_id"].to_list() == ["pair-train-000-a", "pair-train-000-b"]
    assert ok["ambiguous_query"].to_list() == ["Something about my order"] * 2  # one query, shared
    assert ok["unambiguous_query"].to_list() == ["Cancel my order", "Where is my order"]
    assert ok["true_intent"].to_list() == ["cancel_order", "track_order"] and ok["kept"].all()
    assert ok["candidate_intents"][0].to_list() == ["cancel_order", "track_order"]
    same = out.filter(pl.col("group_id") == "pair-test-001")
    assert not same["kept"].any()
    assert same["reject_reason"][0] == "the ambiguous query and its two versions are not all different"
    down = out.filter(pl.col("group_id") == "pair-test-002")
    assert down["status"].to_list() == ["llm_error"] * 2 and not down["kept"].any()
    assert set(out["method"]) == {"intent_pair"}


def test_cut_never_keeps_a_conversation_without_a_final_prediction():
    conv = _conv([0.0, 0.0, 0.0, 1.0], ["max_turns", "invalid_reply", "wrong_intent", "correct"])
    out = top_percentile_cut(conv, 100, require_correct=False).sort("conversation_id")
    assert out["kept"].to_list() == [False, False, True, True]  # wrong intent allowed only without require_correct
    assert out["removed_reason"].to_list()[:2] == ["no final prediction (outcome max_turns)",
                                                   "no final prediction (outcome invalid_reply)"]


def test_label_dropout_true_intent_absent_from_the_whole_system_prompt():
    cat = Catalog(tuple(Intent(n, f"about {n.replace('_', ' ')}", (f"ex {i}",)) for i, n in enumerate(NAMES)))
    demos = [[{"role": "user", "content": "where is my stuff"}, {"role": "assistant", "content": "track_order"}],
             [{"role": "user", "content": "stop it"}, {"role": "assistant", "content": "cancel_order"}]]
    seeds = [ConversationSeed(f"u{i}", "unambiguous", f"q{i}", f"text {i}", f"text {i}", "track_order",
                                tuple(NAMES), "train") for i in range(2)]
    turns = _turns_for([(s, [("user", s.first_message), ("assistant", "track_order")]) for s in seeds])
    conv = pl.DataFrame({"conversation_id": ["u0", "u1"], "kind": ["unambiguous"] * 2, "method": [None, None],
                         "split": ["train"] * 2, "query_id": ["q0", "q1"], "true_intent": ["track_order"] * 2,
                         "outcome": ["correct"] * 2, "n_turns": [1, 1], "sdrs": [1.0, 1.0], "score_status": ["ok"] * 2})
    out = training_conversations(turns, conv, cat, demos, IntentsConfig(keep_percentile=100, require_correct=True,
                                                                        n_label_dropout=2, seed=0,
                                                                        examples_per_intent=1))
    assert out["label_dropout"].sum() == 2
    for r in out.filter(pl.col("label_dropout")).iter_rows(named=True):
        system = r["messages"][0]["content"]
        assert "track_order" not in system  # not in the list, not in a demo, not in an example
        assert "cancel_order" in system and "stop it" in system  # the other demo stays
        assert "where is my stuff" not in system
    # without dropout the same prompt does list it, and shows its demo
    kept = training_conversations(turns, conv, cat, demos, IntentsConfig(keep_percentile=100, require_correct=True,
                                                                         n_label_dropout=0, seed=0,
                                                                         examples_per_intent=1))
    assert "track_order" in kept["messages"][0][0]["content"] and "where is my stuff" in kept["messages"][0][0][
        "content"]


def test_ood_conversations_may_ask_before_saying_out_of_domain():
    ask = json.dumps({"action": "ask_clarifying_question", "intent": "none", "question": "What do you need?"})
    ood = json.dumps({"action": "out_of_domain", "intent": "none", "question": ""})
    pred_true = json.dumps({"action": "predict_intent", "intent": "track_order", "question": ""})
    cands = [n for n in NAMES if n != "track_order"]
    seeds = [ConversationSeed("o", "ood", "u1", "book a flight", "book a flight", OOD_TARGET, tuple(NAMES),
                                "test", max_turns=3),
             ConversationSeed("d", "ood_dropout", "u2", "where is my parcel", "where is my parcel", OOD_TARGET,
                                tuple(cands), "test", max_turns=3)]
    chat, calls = _script({"assistant": [ask, pred_true, ood], "user_simulator": ['{"reply": "a flight to Rome"}']})
    t = simulate_conversations(seeds, chat, _catalog(), [], IntentsConfig())
    conv = {r["conversation_id"]: r for r in t.group_by("conversation_id").agg(
        pl.col("outcome", "n_assistant_turns", "final_prediction").first()).to_dicts()}
    assert conv["o"] == {"conversation_id": "o", "outcome": "correct", "n_assistant_turns": 2,
                         "final_prediction": OOD_TARGET}
    # label dropout: the true intent is not a candidate, so predicting it is an unusable reply, not a success
    assert conv["d"]["outcome"] == "invalid_reply" and conv["d"]["final_prediction"] is None
    tab = intent_eval_table(t.with_columns(subject=pl.lit("s")),
                              pl.DataFrame(schema={"subject": pl.Utf8, "kind": pl.Utf8, **{
                                  c: pl.Float64 for c in ("sdrs", "ars", "relevance", "conciseness",
                                                          "repetition_avoidance", "factuality", "politeness")},
                                  "assistant_turn": pl.Int64, "conversation_id": pl.Utf8,
                                  "score_status": pl.Utf8})).row(0, named=True)
    assert (tab["ood_accuracy"], tab["ood_dropout_accuracy"]) == (1.0, 0.0)
    assert tab["mean_turns_ood"] == 1.5


# --------------------------------------------------------------------------- redesign: LLMTask steps

def test_reply_schemas_are_the_hand_written_ones():
    """The JSON schemas are part of the cache key and the llama.cpp grammar: the reply models must reproduce them."""
    assistant = {"type": "object", "properties": {
        "action": {"type": "string", "enum": ["predict_intent", "ask_clarifying_question", "out_of_domain"]},
        "intent": {"type": "string", "enum": ["a", "b", "none"]}, "question": {"type": "string", "maxLength": 120}},
        "required": ["action", "intent", "question"]}
    assert assistant_schema(("a", "b")) == assistant
    assert assistant_schema(("a",))["properties"]["intent"] == {"type": "string", "enum": ["a", "none"]}
    assert USER.schema == {"type": "object", "properties": {"reply": {"type": "string", "minLength": 2,
                                                                      "maxLength": 120}}, "required": ["reply"]}
    assert info_task(3).schema == {"type": "object", "properties": {"judgments": {
        "type": "array", "minItems": 3, "maxItems": 3, "items": {"type": "string", "enum": ["enough", "not enough"]}}},
        "required": ["judgments"]}
    keys = {"relevance": "relevance", "conciseness": "conciseness", "repetition": "repetition_avoidance",
            "factuality": "factuality", "politeness": "politeness"}
    item = {"type": "object", "properties": {k: {"type": "string", "enum": list(QUALITY_SCALES[n])}
                                             for k, n in keys.items()}, "required": list(keys)}
    assert quality_task(2).schema == {"type": "object", "properties": {"ratings": {
        "type": "array", "minItems": 2, "maxItems": 2, "items": item}}, "required": ["ratings"]}
    assert (info_task(3).sampling, quality_task(2).sampling) == ({"temperature": 0.0, "max_tokens": 64},
                                                                 {"temperature": 0.0, "max_tokens": 240})


def test_repaired_replies_are_counted_per_row():
    """Lenient JSON recovery (a raw newline inside a string) is flagged on the rows that needed it."""
    seeds = [ConversationSeed("a", "ambiguous", "qa", "help", "cancel my order", "cancel_order", tuple(NAMES),
                              "train", "edit", max_turns=2)]
    ask = '{"action": "ask_clarifying_question", "intent": "none", "question": "Which\none?"}'
    pred = json.dumps({"action": "predict_intent", "intent": "cancel_order", "question": ""})
    chat, _ = _script({"assistant": [ask, pred], "user_simulator": ['{"reply": "cancel\nit"}']})
    t = simulate_conversations(seeds, chat, _catalog(), [], IntentsConfig())
    assert t["repaired"].to_list() == [None, True, True, False]
    assert t["text"].to_list() == ["help", "Which one?", "cancel it", "cancel_order"]
    assert t["outcome"][0] == "correct"
