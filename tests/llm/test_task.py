"""LLMTask: JSON recovery, reply-model validation (the words the tables use), outcomes per sample, input errors,
lenient repair, and the reply schema the backends get."""

import dataclasses
import json

import pytest
from fakes import ScriptedBackend

from dagster_project.config import parse_params
from dagster_project.llm.client import LLMClient, LLMSession
from dagster_project.llm.chat import ChatResult
from dagster_project.llm.task import (
    LLMTask, NonEmpty, Reply, Status, ask_all, parse_json_object, reply_schema, text_field,
)

# ---------------------------------------------------------------- parse_json_object

def test_json_plain():
    assert parse_json_object('{"a": 1, "b": "x"}')[:2] == ({"a": 1, "b": "x"}, None)


def test_json_fenced():
    raw = 'Here you go:\n```json\n{"query": "q", "n": [1, 2]}\n```\nHope that helps {sic}'
    assert parse_json_object(raw)[:2] == ({"query": "q", "n": [1, 2]}, None)
    assert parse_json_object('```\n{"a": true}\n```')[:2] == ({"a": True}, None)
    assert parse_json_object('```JSON\n{"a": null}\n```')[:2] == ({"a": None}, None)


def test_json_with_chatter_around():
    raw = 'Sure! Here is the JSON: {"reply": "hi {there}"} -- let me know.'
    assert parse_json_object(raw)[:2] == ({"reply": "hi {there}"}, None)


def test_json_nested_object():
    obj, err, _ = parse_json_object('x {"a": {"b": [1, {"c": 2}]}} y')
    assert err is None and obj == {"a": {"b": [1, {"c": 2}]}}


@pytest.mark.parametrize("raw, kind", [("[1, 2, 3]", "list"), ('"just a string"', "str"),
                                       ("42", "int"), ('[{"a": 1}, {"b": 2}]', "list")])
def test_json_not_an_object(raw, kind):
    obj, err, _ = parse_json_object(raw)
    assert obj is None
    assert err == f"expected a JSON object, got {kind}"


@pytest.mark.parametrize("raw", ['{"a": 1,}', '{"a": 1', "{'a': 1}", 'prefix {"a": } suffix', "hello"])
def test_json_broken_gives_reason(raw):
    obj, err, _ = parse_json_object(raw)
    assert obj is None
    assert err and err.startswith("invalid JSON")


@pytest.mark.parametrize("raw", ["", "   \n", None])
def test_json_empty(raw):
    assert parse_json_object(raw)[:2] == (None, "empty output")



# ---------------------------------------------------------------- reply models (what require_fields used to check)


class Scored(Reply):
    query: NonEmpty = text_field(80)
    score: int
    items: list


TASK = LLMTask("rate_single_turn", role="judge", reply=Scored)


def _err(obj) -> str | None:
    return TASK.parse(json.dumps(obj)).error


def test_reply_ok_and_extra_keys_ignored():
    p = TASK.parse(json.dumps({"query": "q", "score": 3, "items": [], "extra": 1}))
    assert p.status is Status.OK and p.value.score == 3


def test_reply_missing_field():
    assert _err({"query": "q", "items": []}) == "missing field 'score'"


def test_reply_wrong_type():
    assert _err({"query": "q", "score": "3", "items": []}) == "field 'score' should be int, got str"
    assert _err({"query": "q", "score": 3, "items": "a, b"}) == "field 'items' should be list, got str"
    assert _err({"query": "q", "score": 3.0, "items": []}) == "field 'score' should be int, got float"


def test_reply_bool_is_not_int():
    assert _err({"query": "q", "score": True, "items": []}) == "field 'score' should be int, got bool"


@pytest.mark.parametrize("value", ["", "   ", "\n\t"])
def test_reply_empty_string(value):
    assert _err({"query": value, "score": 1, "items": []}) == "field 'query' is empty"


def test_reply_bad_json_is_a_parse_error_with_the_reason():
    p = TASK.parse("not json at all")
    assert p.status is Status.PARSE_ERROR and p.error == "invalid JSON: Expecting value at char 0"


def test_reply_schema_is_plain_json_schema():
    assert reply_schema(Scored) == {
        "type": "object", "required": ["query", "score", "items"],
        "properties": {"query": {"type": "string", "maxLength": 80}, "score": {"type": "integer"},
                       "items": {"type": "array", "items": {}}}}


def test_check_turns_a_valid_reply_into_a_parse_error():
    task = LLMTask("rate_single_turn", role="judge", reply=Scored, check=lambda v, item: "too low" if v.score < item else None)
    assert task.parse(json.dumps({"query": "q", "score": 1, "items": []}), 2).error == "too low"
    assert task.parse(json.dumps({"query": "q", "score": 3, "items": []}), 2).status is Status.OK


def test_lenient_recovers_raw_newlines_and_says_so():
    text = '{"query": "line one' + "\n" + 'line two", "score": 2, "items": []}'
    assert TASK.parse(text).status is Status.PARSE_ERROR
    lenient = LLMTask("rate_single_turn", role="judge", reply=Scored, lenient=True)
    p = lenient.parse(text)
    assert p.status is Status.OK and p.repaired and p.value.query == "line one\nline two"
    assert not lenient.parse('{"query": "q", "score": 2, "items": []}').repaired


# ---------------------------------------------------------------- running a task over items


def _session(tmp_path, responder, fail=None):
    cfg = parse_params({"llm": {"cache_path": str(tmp_path / "c.sqlite")}}).llm
    backend = ScriptedBackend(responder, fail)
    return LLMSession(LLMClient(cfg, backends={"llamacpp": lambda c: backend})), backend


def test_run_gives_one_outcome_per_item_and_sample_with_provenance(tmp_path):
    replies = {0: json.dumps({"query": "a", "score": 1, "items": []}), 1: "garbage"}
    chat, backend = _session(tmp_path, lambda job, i: replies[i],
                             fail=lambda job: "boom" if "broken" in job.messages[-1]["content"] else None)
    items = [{"query": "fine", "subtype": "lexical"}, {"query": "broken", "subtype": "lexical"}, {"subtype": "x"}]
    out = TASK.run(chat, items, lambda it: {"query": it["query"], "subtype_name": it["subtype"], "definition": "d", "clarifying_question": "c"},
                   lambda it: {"n": 2})
    assert [(o.item["subtype"], o.sample, o.status) for o in out] == [
        ("lexical", 0, Status.OK), ("lexical", 1, Status.PARSE_ERROR),
        ("lexical", 0, Status.LLM_ERROR), ("lexical", 1, Status.LLM_ERROR), ("x", 0, Status.INPUT_ERROR)]
    assert out[0].provenance() == {"status": "ok", "error": None, "raw_output": replies[0], "model": "smollm2-135m-instruct",
                                   "prompt_version": TASK.version}
    assert out[2].raw_output is None and out[2].error == "boom"
    assert "query" in out[4].error and len(backend.jobs) == 2  # the item that could not be rendered was not sent
    assert chat.usage()["llm/judge/requests"] == 2 and chat.usage()["llm/requests"] == 2


def test_request_carries_schema_version_and_sampling_defaults():
    task = LLMTask("rate_single_turn", role="judge", reply=Scored, sampling={"temperature": 0.0, "max_tokens": 40})
    req = task.request({"query": "q", "subtype_name": "s", "definition": "d", "clarifying_question": "c"}, seed=3)
    assert req.json_schema == reply_schema(Scored) and req.prompt_version == task.version
    assert (req.sampling.temperature, req.sampling.max_tokens, req.sampling.seed) == (0.0, 40, 3)


def test_ask_all_mixes_steps_in_one_call_and_can_send_identical_requests_once(tmp_path):
    calls = []

    def chat(role, requests):
        calls.append((role, len(requests)))
        return [ChatResult(texts=[json.dumps({"query": "a", "score": 1, "items": []})], model="m") for _ in requests]

    free = LLMTask("rate_single_turn", role="judge")
    values = {"query": "q", "subtype_name": "s", "definition": "d", "clarifying_question": "c"}
    asks = [TASK.ask("x", values), free.ask("y", values), TASK.ask("z", values)]
    answers = ask_all(chat, "judge", asks)
    assert calls == [("judge", 3)] and [a.item for a in answers] == ["x", "y", "z"]
    assert answers[0].first.value.score == 1 and answers[1].first.value.startswith("{")  # free text: the text
    assert ask_all(chat, "judge", asks, once=True)[2].first.ok and calls[-1] == ("judge", 2)  # x and z are one request
    assert ask_all(chat, "judge", []) == [] and len(calls) == 2


def test_a_reply_cut_off_at_max_tokens_says_so():
    cut = ChatResult(texts=['{"query": "a", "sco', '{"query": "a", "score": 1, "items": []}'], truncated=[True, True],
                     model="m")
    req = TASK.request({"query": "q", "subtype_name": "s", "definition": "d", "clarifying_question": "c"}, n=2)
    broken, whole = TASK.outcomes("x", req, cut)
    assert broken.status is Status.PARSE_ERROR and broken.error.startswith("truncated: cut off at max_tokens")
    assert whole.ok  # a reply that is complete although it used every token is still usable


def test_a_free_text_reply_cut_off_at_max_tokens_is_a_parse_error_unless_the_task_accepts_it():
    cut = ChatResult(texts=["The answer is: first you take the", "The answer is: done."], truncated=[True, False],
                     model="m")
    free = LLMTask("rate_single_turn", role="judge")
    req = free.request({"query": "q", "subtype_name": "s", "definition": "d", "clarifying_question": "c"}, n=2)
    broken, whole = free.outcomes("x", req, cut)
    assert broken.status is Status.PARSE_ERROR and broken.error == "truncated: cut off at max_tokens"
    assert broken.value is None and broken.raw_output == cut.texts[0]  # kept raw for inspection
    assert whole.ok and whole.value == "The answer is: done."
    # a protocol reply is decided by its opening words: the step may accept a cut-off tail
    lenient = dataclasses.replace(free, accept_truncated=True)
    assert [o.ok for o in lenient.outcomes("x", req, cut)] == [True, True]
