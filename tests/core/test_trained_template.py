"""A trained model is evaluated the way it was trained (issue 26): a scripted model that replies perfectly in its
training format, written by the functions that write the training targets, scores 100% in each format; the same
replies read by another format's parser do not; a folder without a recorded template is refused."""

import json

import polars as pl
import pytest

from dagster_project.config import parse_params
from dagster_project.core.clarifymt.agent.predictions import predict_turns
from dagster_project.core.clarifymt.agent.base import BaseMethod
from dagster_project.core.clarifymt.external import held_out_turns
from dagster_project.core.clarifymt.trained import TemplateMethod, subject_method, trained_comparison
from dagster_project.core.clarilm.annotations import format_response, held_out_rows
from dagster_project.core.double_turn.evaluation import subject_task
from dagster_project.core.double_turn.exports import turn2_prompt, turn2_target
from dagster_project.core.intents.catalog import OOD_TARGET
from dagster_project.core.training.template import (
    TrainedTemplate,
    clarifymt_template,
    clarilm_template,
    double_turn_template,
    intents_template,
    load_trained_template,
)
from dagster_project.llm.chat import ChatResult
from dagster_project.llm.prompts import load_prompt
from dagster_project.llm.protocol import ANSWER_PREFIX, CLARIFY_PREFIX
from dagster_project.llm.trained import TrainedModelMissing

SYSTEM = "Say 'Need clarification: yes' and ask, or 'Need clarification: no' and answer."
# question -> (reference action, the text a perfect model says)
ITEMS = {"Book a flight": ("clarify", "Where do you want to fly to?"), "What is 2+2?": ("answer", "4"),
         "Tell me about jaguars": ("clarify", "The animal or the car?"), "Capital of France?": ("answer", "Paris"),
         "Plan my trip": ("clarify", "Which city and dates?"), "How many legs has a spider?": ("answer", "Eight")}

PERFECT = {  # the reply format of each template, written by the code that writes its training targets
    "clarifymt": lambda act, text: f"{CLARIFY_PREFIX if act == 'clarify' else ANSWER_PREFIX} {text}",
    "clarilm": format_response,
    "double_turn": lambda act, text: turn2_target("clarify_or_direct", "json", act, text),
}


def _turns() -> pl.DataFrame:
    """ClariLM's held-out split built by the pipeline's own functions (annotations -> evaluation turns)."""
    cotap = pl.DataFrame([{"question_id": f"q{i}", "question": q, "question_source": "QL", "split": "test",
                           "status": "ok", "decision": "ask" if a == "clarify" else "answer",
                           "chosen_question": t if a == "clarify" else None, "answer": t if a == "answer" else None}
                          for i, (q, (a, t)) in enumerate(ITEMS.items())])
    return held_out_turns(held_out_rows(cotap, SYSTEM), "clarilm_test")


def _scripted(template: TrainedTemplate, prompts: list):
    """A model that learned `template` perfectly: it reads the question out of its prompt and replies in format."""
    reply = PERFECT[template.name]

    def chat(role, requests):
        out = []
        for req in requests:
            prompts.append(list(req.messages))
            act, text = next(v for q, v in ITEMS.items() if q in req.messages[-1]["content"])
            out.append(ChatResult(texts=[reply(act, text)], model="scripted"))
        return out
    return chat


def _score(pred: pl.DataFrame) -> dict:
    both = pl.concat([pred, pred.with_columns(subject=pl.lit("ref"))])
    return trained_comparison(both, [("trained", "ref")]).row(0, named=True)


@pytest.mark.parametrize("template", [clarifymt_template(), clarilm_template(SYSTEM), double_turn_template("json")],
                         ids=lambda t: t.parser)
def test_a_perfect_model_scores_100_percent_in_its_training_format(template):
    prompts: list = []
    method = TemplateMethod("base", template, "subject:trained", max_tokens=64)
    pred = predict_turns(method, "trained", _turns(), _scripted(template, prompts), embed=None)
    assert pred.height == len(ITEMS) and set(pred["status"]) == {"ok"}
    side = _score(pred)
    assert (side["n"], side["accuracy"], side["clarify_f1"], side["macro_f1"], side["protocol_compliance"]) == \
        (len(ITEMS), 1.0, 1.0, 1.0, 1.0)
    assert all(p[0] == {"role": "system", "content": template.system.strip()} for p in prompts)
    # read by another format's parser, the same perfect replies are protocol failures: the test can fail
    if template.name != "clarifymt":
        wrong = predict_turns(BaseMethod(parse_params({}).evaluation, "subject:trained"), "trained", _turns(),
                              _scripted(template, []), embed=None)
        assert _score(wrong)["accuracy"] < 0.5


def test_a_clarilm_model_is_asked_exactly_the_held_out_prompt_it_was_trained_on():
    """external.py keeps only the question in the turns; the template restores ClariLM's system prompt."""
    prompts: list = []
    template = clarilm_template(SYSTEM)
    predict_turns(TemplateMethod("base", template, "subject:x", 64), "x", _turns(), _scripted(template, prompts), None)
    cotap_messages = [[{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}] for q in ITEMS]
    assert prompts == cotap_messages


@pytest.mark.parametrize("template", [clarilm_template(SYSTEM), double_turn_template("json"),
                                      double_turn_template("free_text")], ids=lambda t: t.parser)
def test_a_json_trained_model_is_asked_with_the_schema_its_own_evaluation_sends(template):
    """Table 1 asks the double-turn models with the Clarify-or-Direct reply schema (a grammar on llama.cpp), so
    ClarifyMT asks them with the same one; free-text templates send none."""
    seen: list = []

    def chat(role, requests):
        seen.extend(r.json_schema for r in requests)
        return [ChatResult(texts=['{"action": "answer", "text": "4"}'], model="scripted") for _ in requests]

    pred = predict_turns(TemplateMethod("base", template, "subject:x", 64), "x", _turns(), chat, None)
    assert len(seen) == pred.height == len(ITEMS)
    if template.parser == "double_turn_json":
        want = subject_task("clarify_or_direct", "json").schema
        assert want["properties"]["action"]["enum"] == ["answer", "clarify"]
        assert seen == [want] * len(ITEMS) and set(pred["action"]) == {"answer"}
    else:
        assert seen == [None] * len(ITEMS)


def test_double_turn_template_renders_the_export_prompt():
    t = double_turn_template("json")
    assert t.render([{"role": "user", "content": "who won?"}]) == turn2_prompt("clarify_or_direct", "who won?", "json")
    assert t.unwrap(turn2_prompt("clarify_or_direct", "who won?", "json")[-1]["content"]) == "who won?"
    assert t.parse('{"clarifying_question": "Which year?"}').action == "clarify"
    assert double_turn_template("free_text").parse("Clarifying Question: Which year?").text == "Which year?"


def test_a_perfect_intents_model_scores_100_percent_in_its_format():
    t = intents_template()
    assert t.values_needed() == ["catalogue", "examples"]
    cands = ["track_order", "cancel_order", "refund"]
    cases = [("where is my parcel", "track_order", "intent"), ("stop my order", "cancel_order", "intent"),
             ("my order", None, "clarify"), ("book a hotel", None, "ood")]
    right = 0
    for utterance, truth, kind in cases:
        msgs = t.render([{"role": "user", "content": utterance}], catalogue="- track_order\n- cancel_order",
                        examples="")
        assert msgs == load_prompt("intents_assistant", "text").messages(
            catalogue="- track_order\n- cancel_order", examples="", query=utterance)
        reply = {"intent": truth, "clarify": "Do you want to track it or cancel it?", "ood": OOD_TARGET}[kind]
        d = t.parse(reply, candidates=cands)
        right += (d.action, d.text) == {"intent": ("answer", truth), "clarify": ("clarify", reply),
                                        "ood": ("answer", OOD_TARGET)}[kind]
    assert right == len(cases)
    assert clarilm_template(SYSTEM).parse("track_order").action == "invalid"  # another format does not read it
    with pytest.raises(ValueError, match="candidates"):
        t.parse("track_order")


def _folder(root, meta: dict) -> None:
    folder = root / "assets" / "training" / "clarilm_sft"
    (folder / "adapter").mkdir(parents=True)
    (folder / "adapter" / "adapter_config.json").write_text("{}")
    (folder / "training.json").write_text(json.dumps(meta))


def test_a_folder_without_a_recorded_template_is_refused_naming_folder_and_field(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _folder(tmp_path, {"base_model": "smollm2-135m-instruct"})
    with pytest.raises(TrainedModelMissing) as err:
        load_trained_template("training/clarilm_sft", "sft")
    msg = str(err.value)
    assert "assets/training/clarilm_sft/training.json" in msg and "`template`" in msg and "retrain" in msg
    cfg = parse_params({}).evaluation
    method, blocked = subject_method("sft", "training/clarilm_sft", "base", cfg)
    assert blocked == msg
    record = clarilm_template(SYSTEM).record()
    del record["parser"]
    (tmp_path / "assets/training/clarilm_sft/training.json").write_text(json.dumps({"base_model": "m",
                                                                                    "template": record}))
    with pytest.raises(TrainedModelMissing, match=r"lacks field\(s\) \['parser'\]; retrain"):
        load_trained_template("training/clarilm_sft", "sft")


def test_a_trained_subject_runs_only_in_its_template(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _folder(tmp_path, {"base_model": "m", "template": clarilm_template(SYSTEM).record()})
    cfg = parse_params({"evaluation": {"methods": ["base", "cot"]}}).evaluation
    method, blocked = subject_method("sft", "training/clarilm_sft", "base", cfg)
    assert blocked is None and isinstance(method, TemplateMethod) and method.template.system == SYSTEM
    _, blocked = subject_method("sft", "training/clarilm_sft", "cot", cfg)
    assert "evaluated only as it was trained" in blocked
    (tmp_path / "assets/training/clarilm_sft/training.json").write_text(json.dumps(
        {"base_model": "m", "template": intents_template().record()}))
    _, blocked = subject_method("sft", "training/clarilm_sft", "base", cfg)
    assert "['catalogue', 'examples']" in blocked


def test_mismatch_tells_a_prompt_of_another_template():
    dt, cl = double_turn_template("json"), clarilm_template(SYSTEM)
    assert dt.mismatch(turn2_prompt("clarify_or_direct", "who won?", "json")) is None
    assert cl.mismatch([{"role": "system", "content": SYSTEM}, {"role": "user", "content": "q"}]) is None
    assert "system prompt" in cl.mismatch([{"role": "user", "content": "q"}])
    assert "user message" in dt.mismatch([*turn2_prompt("clarify_or_direct", "x", "json")[:1],
                                          {"role": "user", "content": "who won?"}])
    assert intents_template().mismatch([{"role": "system", "content": "any catalogue"},
                                        {"role": "user", "content": "q"}]) is None
