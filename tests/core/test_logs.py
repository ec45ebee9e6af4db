"""core/logs.py: format detection, streaming reads, every quarantine reason, the prefilter, extraction parsing."""

from datetime import UTC, date, datetime
import gzip
import json
from pathlib import Path

import polars as pl
import pytest

from dagster_project.config import LogsConfig
from dagster_project.core.clarilm.extraction import EXTRACT, EXTRACT_REFINEMENT, extract, in_log, parse_extraction
from dagster_project.core.clarilm.logs import (
    DayTally,
    ReadStats,
    assistant_asked,
    dropped_by_length,
    ledger,
    load_logs,
    log_dates,
    pass_rate,
    prefilter,
    read_logs,
    stream_days,
    tally_ledger,
    user_refinements,
)
from dagster_project.io.formats.chat_logs import Rejection, _plain_turn, _turn, expand_paths
from dagster_project.io.records import InputFileError
from dagster_project.llm.chat import ChatResult

EXTRACTION_SCHEMA = {  # the schema sent before the move to LLMTask: part of the cache key, must not change
    "type": "object",
    "properties": {
        "is_clarification": {"type": "boolean"},
        "query": {"type": "string", "maxLength": 300},
        "clarifying_question": {"type": "string", "maxLength": 300},
        "refined_query": {"type": "string", "maxLength": 300},
        "facet": {"type": "string", "maxLength": 80},
    },
    "required": ["is_clarification", "query", "clarifying_question", "refined_query", "facet"],
}

REPO = Path(__file__).resolve().parents[2]


def _sg(cid, *turns):
    return {"id": cid, "conversations": [{"from": "human" if i % 2 == 0 else "gpt", "value": t}
                                         for i, t in enumerate(turns)]}


def _wc(cid, *turns, ts="2024-05-02T10:00:00Z", language="English"):
    return {"conversation_hash": cid, "timestamp": ts, "language": language,
            "conversation": [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(turns)]}


def _oa(cid, *turns):
    return {"id": cid, "messages": [{"role": "system", "content": "Be brief."}]
            + [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(turns)]}


def _jsonl(path: Path, records, gz=False) -> Path:
    data = b"".join((r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n" for r in records)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def _read(paths, partition_date=None, **cfg):
    cfg = LogsConfig(**({"default_log_date": "2024-01-01"} | cfg))
    return load_logs([Path(p) for p in paths], cfg, partition_date)


def _codes(rejected):
    """The reason codes of quarantine rows (a reason is `code: detail`)."""
    return [r.split(":")[0] for r in rejected["reason"]]


# --------------------------------------------------------------------------- formats

def test_sharegpt_json_array(tmp_path):
    p = tmp_path / "a.json"
    p.write_text(json.dumps([_sg("s1", "hi?", "hello"), _sg("s2", "q", "a", "q2")]))
    turns, rej, stats = _read([p])
    assert rej.height == 0 and stats.files == {p.as_posix(): "sharegpt"}
    assert turns.select("conversation_id", "turn_index", "role").rows() == [
        ("s1", 0, "user"), ("s1", 1, "assistant"), ("s2", 0, "user"), ("s2", 1, "assistant"), ("s2", 2, "user")]
    assert set(turns["log_date"]) == {date(2024, 1, 1)}  # no timestamp: logs.default_log_date
    assert turns["language"].is_null().all()


def test_wildchat_gzip_jsonl_with_timestamp_and_language(tmp_path):
    p = _jsonl(tmp_path / "w.jsonl.gz", [_wc("w1", "hola", "hi", ts="2024-05-03T23:30:00Z", language="Spanish")], gz=True)
    turns, rej, stats = _read([p])
    assert stats.files[p.as_posix()] == "wildchat"
    assert turns["log_date"].to_list() == [date(2024, 5, 3)] * 2
    assert turns["language"].to_list() == ["Spanish"] * 2
    assert turns["timestamp"][0] == datetime(2024, 5, 3, 23, 30, tzinfo=UTC)


def test_openai_jsonl_keeps_system_turn_and_epoch_time(tmp_path):
    rec = _oa("o1", "q", "a") | {"created": 1714651200}
    turns, _, stats = _read([_jsonl(tmp_path / "o.jsonl", [rec])])
    assert stats.files[(tmp_path / "o.jsonl").as_posix()] == "openai"
    assert turns["role"].to_list() == ["system", "user", "assistant"]
    assert turns["log_date"][0] == date(2024, 5, 2)


def test_parquet_with_wildchat_fields(tmp_path):
    p = tmp_path / "p.parquet"
    pl.DataFrame([_wc("p1", "a?", "b"), _wc("p2", "c", "d")]).write_parquet(p)
    turns, rej, stats = _read([p])
    assert stats.files[p.as_posix()] == "wildchat" and turns.height == 4 and rej.height == 0


def test_json_file_holding_jsonl_and_missing_ids_get_content_hash(tmp_path):
    recs = [{"messages": [{"role": "user", "content": "same"}]}, {"messages": [{"role": "user", "content": "other"}]}]
    p = _jsonl(tmp_path / "x.json", recs)
    turns, rej, _ = _read([p])
    ids = turns["conversation_id"].to_list()
    assert len(set(ids)) == 2 and all(i.startswith("h-") for i in ids)
    again, _, _ = _read([p])
    assert again["conversation_id"].to_list() == ids  # deterministic


def test_sample_logs_shipped_with_the_repo():
    paths = expand_paths(["data/logs/*.json", "data/logs/*.jsonl", "data/logs/*.jsonl.gz", "data/logs/*.parquet"],
                         REPO)
    turns, rej, stats = _read(paths)
    assert set(stats.files.values()) == {"sharegpt", "wildchat", "openai"}
    assert stats.records_read == 50 and stats.conversations_kept == 43 and stats.records_rejected == 7
    assert stats.records_read == stats.conversations_kept + stats.records_rejected


# --------------------------------------------------------------------------- quarantine

def test_every_quarantine_reason(tmp_path):
    recs = [
        _wc("ok", "q?", "a"),
        b'{"conversation_hash": "broken", "conversation": [',
        b'{"conversation_hash": "latin", "conversation": [{"role": "user", "content": "caf\xe9"}]}',
        {"conversation_hash": "nolist", "conversation": "hello"},
        ["not", "an", "object"],
        {"conversation_hash": "nofield"},
        {"conversation_hash": "norole", "conversation": [{"content": "x"}]},
        {"conversation_hash": "badrole", "conversation": [{"role": "robot", "content": "x"}]},
        {"conversation_hash": "empty", "conversation": [{"role": "user", "content": " \n"}]},
        {"conversation_hash": "inttext", "conversation": [{"role": "user", "content": 7}]},
        {"conversation_hash": "huge", "conversation": [{"role": "user", "content": "x" * 101}]},
        {"conversation_hash": "onlybot", "conversation": [{"role": "assistant", "content": "hello"}]},
        {"conversation_hash": "badtime", "timestamp": "yesterday", "conversation": [{"role": "user", "content": "x"}]},
        _wc("ok", "again", "dup"),
    ]
    p = _jsonl(tmp_path / "w.jsonl", recs)
    turns, rej, stats = _read([p], max_message_chars=100)
    assert rej.columns == ["file", "record", "field", "reason", "raw"]  # the io.records Quarantine
    by_line = {r["record"]: (r["reason"].split(":")[0], r["field"]) for r in rej.to_dicts()}
    assert by_line == {  # 1-based line numbers (line 1 is the good record)
        2: ("invalid_json", "<record>"), 3: ("not_utf8", "<record>"), 4: ("wrong_type", "conversation"),
        5: ("wrong_type", "<record>"), 6: ("missing_field", "conversation"), 7: ("missing_role", "conversation[0].role"),
        8: ("unknown_role", "conversation[0].role"), 9: ("empty_text", "conversation[0].content"),
        10: ("wrong_type", "conversation[0].content"), 11: ("oversized_message", "conversation[0].content"),
        12: ("no_user_turn", "conversation"), 13: ("wrong_type", "timestamp"),
        14: ("duplicate_conversation_id", "id"),
    }
    assert rej.filter(pl.col("record") == 11)["reason"][0] == (
        "oversized_message: 101 characters > logs.max_message_chars=100")  # the detail follows the code
    assert set(turns["conversation_id"]) == {"ok"}
    assert stats.records_read == 14 == stats.conversations_kept + stats.records_rejected
    assert "caf" in rej.filter(pl.col("reason").str.starts_with("not_utf8"))["raw"][0]  # raw kept for inspection


def test_duplicate_ids_across_files_first_wins(tmp_path):
    a = _jsonl(tmp_path / "a.jsonl", [_wc("same", "first", "x")])
    b = _jsonl(tmp_path / "b.jsonl", [_wc("same", "second", "y")])
    turns, rej, _ = _read([a, b])
    assert turns.filter(pl.col("turn_index") == 0)["text"].to_list() == ["first"]
    assert rej["file"].to_list() == [b.as_posix()] and _codes(rej) == ["duplicate_conversation_id"]


def test_broken_json_array_rejects_the_rest_without_crashing(tmp_path):
    p = tmp_path / "a.json"
    p.write_text(json.dumps([_sg("s1", "q", "a")])[:-1] + ', {"id": "s2", "conversations": [')
    turns, rej, stats = _read([p])
    assert set(turns["conversation_id"]) == {"s1"}
    assert rej["record"].to_list() == [2] and _codes(rej) == ["invalid_json"]  # item 2 of the array
    assert stats.records_read == 2


def test_unknown_layout_is_an_error_naming_file_and_record(tmp_path):
    p = _jsonl(tmp_path / "odd.jsonl", [b"{oops", {"text": "hello", "author": "me"}])
    with pytest.raises(InputFileError, match=r"odd\.jsonl, record 2: cannot tell the log format.*'author', 'text'"):
        _read([p])


def test_a_first_record_that_is_not_an_object_is_quarantined_not_fatal(tmp_path):
    """It used to stop the whole read with "cannot tell the log format"; the next record tells the format."""
    p = tmp_path / "a.json"
    p.write_text(json.dumps([["not", "an", "object"], _sg("ok", "q?", "a")]))
    turns, rej, stats = _read([p])
    assert stats.files == {p.as_posix(): "sharegpt"} and set(turns["conversation_id"]) == {"ok"}
    assert rej.select("record", "field").rows() == [(1, "<record>")] and _codes(rej) == ["wrong_type"]


def test_path_patterns(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(InputFileError, match="matched no files"):
        expand_paths(["*.jsonl"], tmp_path)
    with pytest.raises(InputFileError, match=r"notes\.txt: unsupported file type.*\(params: logs.paths\)"):
        expand_paths(["*.txt"], tmp_path)


def test_reading_streams_in_bounded_batches(tmp_path):
    p = _jsonl(tmp_path / "many.jsonl", [_wc(f"c{i}", "q", "a") for i in range(7)] + [b"{bad"])
    frames = list(read_logs([p], LogsConfig(read_batch_size=3)))
    assert [t.height for t, _ in frames] == [6, 6, 2]  # 3 + 3 + 2 records (the last one rejected)
    assert [r.height for _, r in frames] == [0, 0, 1]


# --------------------------------------------------------------------------- prefilter

def _turns(*convs):
    rows = []
    for cid, turns in convs:
        rows += [{"conversation_id": cid, "turn_index": i, "role": r, "text": t, "source": "f",
                  "source_format": "wildchat", "language": None, "log_date": date(2024, 1, 1)}
                 for i, (r, t) in enumerate(turns)]
    return pl.DataFrame(rows)


def test_prefilter_rules_and_pass_rate():
    u, a = "user", "assistant"
    turns = _turns(
        ("c1", [(u, "Plan a trip."), (a, "Where do you want to go?"), (u, "Japan.")]),                 # kept
        ("c2", [(u, "Hi"), (a, "Which city do you mean?")]),                                             # no reply
        ("c3", [(a, "Welcome! What can I do for you?"), (u, "Help.")]),                                  # no user before
        ("c4", [(u, "Explain X."), (a, "X is " + "very " * 80 + "long. Do you want more?"), (u, "ok")]),  # too long
        ("c5", [(u, "Capital of France?"), (a, "Paris."), (u, "Thanks")]),                               # no question
        ("c6", [(u, "Explain Y."), (a, "Y is Z. Isn't that neat?"), (u, "yes")]),                        # not addressed
        ("c7", [(u, "Fix it"), (a, "Which file is broken?"), (u, "main.py")]),                           # kept (which)
    )
    out = assistant_asked(turns, max_chars=300).collect().sort("conversation_id")
    assert out.select("conversation_id", "reject_reason").rows() == [
        ("c1", None), ("c2", "no_user_reply"), ("c3", "no_preceding_user_turn"), ("c4", "too_long"),
        ("c5", "no_question"), ("c6", "not_addressed_to_user"), ("c7", None)]
    kept = out.filter("kept").row(0, named=True)
    assert (kept["candidate_id"], kept["query"], kept["clarifying_question"], kept["reply"]) == (
        "c1:1", "Plan a trip.", "Where do you want to go?", "Japan.")
    assert out.filter(~pl.col("kept"))["query"].is_null().all()  # texts only for kept rows
    assert pass_rate(out) == pytest.approx(2 / 7)
    assert set(out["source"]) == {"assistant_asked"} and set(out["log_file"]) == {"f"}


def test_prefilter_keeps_order_within_conversation_when_input_is_shuffled():
    turns = _turns(("c1", [("user", "Plan a trip."), ("assistant", "Where do you want to go?"), ("user", "Japan.")]))
    out = prefilter(turns.reverse(), 300, ["assistant_asked"]).collect()
    assert out["kept"].to_list() == [True] and out["reply"][0] == "Japan."


LONG_ASK = "Good question. " + "There are many options to weigh here. " * 10 + "Which city are you flying from?"


def test_length_limit_is_a_param_and_what_it_drops_is_counted():
    turns = _turns(("c1", [("user", "Find me a flight."), ("assistant", LONG_ASK), ("user", "From Oslo.")]),
                   ("c2", [("user", "Explain X."), ("assistant", "X is " + "very " * 80 + "long."), ("user", "ok")]))
    limited = assistant_asked(turns, 300).collect().sort("conversation_id")
    assert limited["reject_reason"].to_list() == ["too_long", "too_long"]
    assert dropped_by_length(limited) == 1  # c1 asks the user something; c2 is just long
    unlimited = assistant_asked(turns, None).collect().sort("conversation_id")
    assert unlimited["reject_reason"].to_list() == [None, "no_question"] and dropped_by_length(unlimited) == 0


def test_user_refinement_pairs_are_consecutive_user_questions():
    u, a = "user", "assistant"
    turns = _turns(
        ("c1", [(u, "Recommend a laptop."), (a, "Try a ThinkPad."), (u, "Under 800 euros, for video editing."),
                (a, "Then an Acer Swift."), (u, "Thanks!")]),
        ("c2", [(u, "Hi"), (a, "Hello!")]),                                     # one user turn: no pair
        ("c3", [(u, "Plan a trip."), (u, "plan a trip!"), (a, "Sure.")]),       # a re-send, back to back
    )
    out = user_refinements(turns).collect().sort("candidate_id")
    assert out.select("candidate_id", "turn_index", "kept", "reject_reason").rows() == [
        ("c1:0>2", 2, True, None), ("c1:2>4", 4, True, None), ("c3:0>1", 1, False, "repeated_question")]
    first = out.row(0, named=True)
    assert (first["source"], first["query"], first["reply"], first["clarifying_question"]) == (
        "user_refinement", "Recommend a laptop.", "Under 800 euros, for video editing.", "Try a ThinkPad.")
    both = prefilter(turns, None).collect()
    assert both.group_by("source").len().sort("source").rows() == [("assistant_asked", 4), ("user_refinement", 3)]
    assert prefilter(turns, None, ["user_refinement"]).collect().height == 3


# --------------------------------------------------------------------------- extraction

CAND = {"candidate_id": "c1:1", "conversation_id": "c1", "turn_index": 1, "source": "assistant_asked",
        "log_file": "f", "log_date": date(2024, 1, 1), "query": "Plan a trip.", "clarifying_question": "Where to?",
        "reply": "Japan, ten days."}
REFINE = CAND | {"candidate_id": "c1:0>2", "turn_index": 2, "source": "user_refinement",
                 "clarifying_question": "Sure, here are ideas."}


def test_parse_extraction_good():
    raw = json.dumps({"is_clarification": True, "query": "Plan a trip", "clarifying_question": "Where to?",
                      "refined_query": "Plan a ten-day trip to Japan", "facet": "destination"})
    r = parse_extraction(CAND, raw)
    assert r["status"] == "ok" and r["kept"] and r["facet"] == "destination"
    assert r["q_next"] == "Plan a ten-day trip to Japan" and r["filled_from_log"] == []


def test_parse_extraction_negative_is_ok_but_not_kept():
    r = parse_extraction(CAND, '{"is_clarification": false, "query": "", "clarifying_question": "", '
                               '"refined_query": "", "facet": ""}')
    assert (r["status"], r["kept"], r["reject_reason"]) == ("ok", False, "not_clarification")


def test_parse_extraction_partial_fills_texts_from_log_but_needs_a_facet():
    r = parse_extraction(CAND, '{"is_clarification": "true", "facet": "destination", "query": "  "}')
    assert r["status"] == "ok" and r["kept"]
    assert (r["q_i"], r["c"], r["q_next"]) == ("Plan a trip.", "Where to?", "Japan, ten days.")
    assert r["filled_from_log"] == ["q_i", "c", "q_next"]
    r = parse_extraction(CAND, '{"is_clarification": true, "query": "Plan a trip", "facet": ""}')
    assert (r["status"], r["kept"]) == ("parse_error", False) and "no facet" in r["error"]


@pytest.mark.parametrize("raw", ["", "I think yes", "[1, 2]", '{"is_clarification": "maybe"}', "{broken"])
def test_parse_extraction_garbage(raw):
    r = parse_extraction(CAND, raw)
    assert (r["status"], r["kept"], r["reject_reason"]) == ("parse_error", False, "parse_error")


def test_extraction_requests_and_results_table():
    cands = pl.DataFrame([CAND, CAND | {"candidate_id": "c2:1", "conversation_id": "c2"}])
    sent = []
    results = [ChatResult(texts=['{"is_clarification": true, "facet": "where"}'], model="m"),
               ChatResult(texts=[""], error="RuntimeError: down", model="m")]
    out = extract(lambda role, reqs: sent.extend(reqs) or results, cands)
    user = sent[0].messages[-1]["content"]
    assert 'q_i: "Plan a trip."' in user and 'q_next: "Japan, ten days."' in user
    assert user.count("facet:") >= 3  # the three positive demonstrations name a facet
    assert sent[0].json_schema == EXTRACTION_SCHEMA == EXTRACT.schema
    assert sent[0].prompt_version.startswith("clarilm_extract")
    assert (sent[0].sampling.temperature, sent[0].sampling.max_tokens) == (0.0, 256)
    assert out["status"].to_list() == ["ok", "llm_error"]
    assert out["kept"].to_list() == [True, False]
    assert out["raw_output"].to_list() == ['{"is_clarification": true, "facet": "where"}', None]


def test_a_logged_question_the_model_invented_is_marked_not_kept():
    logged = CAND | {"clarifying_question": "Great idea! Where do you want to go, and for how long?"}
    copied = json.dumps({"is_clarification": True, "query": "Plan a trip", "facet": "destination",
                         "clarifying_question": "where do you want to go and for how long",
                         "refined_query": "Plan a ten-day trip to Japan"})
    r = parse_extraction(logged, copied)
    assert (r["status"], r["kept"], r["c_in_log"]) == ("ok", True, True)
    invented = json.loads(copied) | {"clarifying_question": "What is your budget?"}
    r = parse_extraction(logged, json.dumps(invented))
    assert (r["status"], r["kept"], r["c_in_log"], r["reject_reason"]) == (
        "parse_error", False, False, "question_not_in_log")
    assert "not in the logged assistant turn" in r["error"] and r["c"] == "What is your budget?"


def test_in_log_ignores_case_punctuation_and_spacing_but_not_words():
    turn = 'Sure!  "Which OS -- Windows or macOS?" Tell me.'
    assert in_log("which os windows or macos", turn)
    assert not in_log("Which OS do you use?", turn) and not in_log("", turn) and not in_log("OS", "MacOS")


def test_refinement_source_uses_its_prompt_and_the_llm_writes_c():
    sent = []
    reply = json.dumps({"is_clarification": True, "query": "Plan a trip", "facet": "destination and length",
                        "clarifying_question": "Where would you like to go, and for how long?",
                        "refined_query": "Plan a ten-day trip to Japan"})
    out = extract(lambda role, reqs: sent.extend(reqs) or [ChatResult(texts=[reply], model="m")],
                  pl.DataFrame([REFINE]))
    user = sent[0].messages[-1]["content"]
    assert sent[0].prompt_version == EXTRACT_REFINEMENT.version != EXTRACT.version
    assert 'q_i: "Plan a trip."' in user and 'q_next: "Japan, ten days."' in user
    assert "Sure, here are ideas." not in user  # the paper's input is the user's questions only
    assert user.count("facet:") >= 3 and user.count("Not refinements") == 1
    row = out.row(0, named=True)
    assert (row["source"], row["kept"], row["c_in_log"], row["log_file"]) == ("user_refinement", True, None, "f")
    assert row["c"] == "Where would you like to go, and for how long?"
    no_c = parse_extraction(REFINE, json.dumps(json.loads(reply) | {"clarifying_question": ""}))
    assert (no_c["status"], no_c["kept"]) == ("parse_error", False)  # nothing logged to fill c from


# --------------------------------------------------------------------------- daily partitions

def _days_file(tmp_path):
    return _jsonl(tmp_path / "d.jsonl", [
        _wc("a", "q1", "r1", ts="2024-05-01T09:00:00Z"),
        b"{broken",  # rejected before its timestamp is read: the file's date (default_log_date 2024-01-01)
        _wc("b", "q2", "r2", ts="2024-05-02T23:59:59Z"),
        _wc("a", "again", "dup", ts="2024-05-02T10:00:00Z"),  # first "a" was on 05-01: still a duplicate
        {"conversation_hash": "c", "timestamp": "2024-05-02T08:00:00Z", "conversation": []},  # malformed: file date
    ])


def test_a_partition_keeps_only_its_day_and_reconciles(tmp_path):
    p = _days_file(tmp_path)
    turns, rej, stats = _read([p], partition_date=date(2024, 5, 2))
    assert set(turns["conversation_id"]) == {"b"} and set(turns["log_date"]) == {date(2024, 5, 2)}
    assert _codes(rej) == ["duplicate_conversation_id"] and rej["record"].to_list() == [4]  # "a" again, on 05-02
    assert stats.records_read == 2 == stats.conversations_kept + stats.records_rejected
    assert stats.other_dates == 3 and stats.read_by_source == {p.as_posix(): 2}
    assert stats.dates == {date(2024, 5, 1): 1, date(2024, 1, 1): 2, date(2024, 5, 2): 2}


def test_partitions_together_read_every_record_once(tmp_path):
    p = _days_file(tmp_path)
    days = log_dates([p], LogsConfig(default_log_date="2024-01-01"))
    assert sum(days.values()) == 5
    seen = []
    for day in days:
        turns, rej, stats = _read([p], partition_date=day)
        book = ledger(stats, day, turns, rej)
        assert book.select("records_read", "conversations_kept", "records_rejected").row(0) == (
            stats.records_read, turns["record_index"].n_unique(), rej.height)
        seen += turns["record_index"].unique().to_list() + [r - 1 for r in rej["record"]]  # 0-based vs lines
    assert sorted(seen) == [0, 1, 2, 3, 4]


def test_ledger_of_a_day_without_records_is_empty(tmp_path):
    p = _days_file(tmp_path)
    turns, rej, stats = _read([p], partition_date=date(2024, 6, 1))
    assert turns.height == rej.height == 0 and ledger(stats, date(2024, 6, 1), turns, rej).height == 0


# --------------------------------------------------------------------------- streaming (one pass, bounded memory)

def test_streamed_pieces_keep_conversations_whole_and_add_up_to_each_days_read(tmp_path):
    p = _jsonl(tmp_path / "s.jsonl", [_wc(f"c{i}", "q?", "which one do you mean?", "that one",
                                          ts=f"2024-05-0{1 + i % 3}T10:00:00Z") for i in range(7)]
               + [b"{broken", _wc("c0", "dup", "dup", ts="2024-05-02T10:00:00Z")])
    cfg = LogsConfig(default_log_date="2024-05-01", read_batch_size=2)
    days = [date(2024, 5, d) for d in (1, 2, 3)]
    stats, tally = ReadStats(), DayTally()
    pieces = list(stream_days([p], cfg, days, stats, tally))
    assert len(pieces) > len(days)  # batches of 2 records: several pieces per day
    for _, turns, _ in pieces:  # every conversation in a piece has all its turns
        assert (turns.group_by("conversation_id").len()["len"] == 3).all()
    for day in days:
        turns, rejected, alone = _read([p], partition_date=day, default_log_date="2024-05-01", read_batch_size=2)
        got = [(t, r) for d, t, r in pieces if d == day]
        assert pl.concat([t for t, _ in got]).equals(turns) and pl.concat([r for _, r in got]).equals(rejected)
        assert tally_ledger(stats, day, tally).drop("file_records_read", "file_records_counted").equals(
            ledger(alone, day, turns, rejected).drop("file_records_read", "file_records_counted"))


@pytest.mark.parametrize("turn", [
    {"role": "user", "content": "hi"}, {"role": "User", "content": "hi"}, {"role": " user ", "content": "hi"},
    {"role": "robot", "content": "hi"}, {"role": "user", "content": "   "}, {"role": "user", "content": "\u3000"},
    {"role": "user", "content": ""}, {"role": "user", "content": 3}, {"role": 1, "content": "hi"},
    {"content": "hi"}, {"role": "user"}, {"role": "user", "content": "x" * 11}, ["user", "hi"], "hi",
    {"from": "gpt", "value": "ok"},
])
def test_the_fast_turn_check_agrees_with_the_full_one(turn):
    for fmt in ("wildchat", "sharegpt"):
        fast = _plain_turn(turn, fmt, 10)
        try:
            full = _turn(turn, "t[0]", fmt, 10)
        except Rejection:
            full = None
        assert fast is None or fast == full  # the fast path only ever accepts what the full check accepts
        if full is not None and isinstance(turn, dict) and turn.get("role", turn.get("from")) in ("user", "gpt"):
            assert fast == full  # and it takes the common case itself
