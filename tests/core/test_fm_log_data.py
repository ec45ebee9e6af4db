"""FM-LOG training rows (issue 27.7): built from a small log_clarifications table (kept pairs only) plus the extraction
prompts' positive demonstrations, in the FM-LOG prompt exactly as the transformers backend serves the facets step."""

import json
from types import SimpleNamespace

import polars as pl
import pytest

from dagster_project.core.clarilm import fm_log_data
from dagster_project.core.clarilm.facets import FM_LOG, fm_log_training_pairs
from dagster_project.core.clarilm.fm_log_data import fm_log_template, shipped_demonstrations, sft_rows, training_pairs
from dagster_project.core.training.template import TrainedTemplate
from dagster_project.llm.backends.transformers import with_schema

LOGS = pl.DataFrame({  # the log_clarifications columns FM-LOG reads; rows 2 and 4 are not kept
    "candidate_id": ["a:0>1", "b:0>1", "c:2", "d:0>1"],
    "kept": [True, False, True, False],
    "q_i": ["Plan a trip for me.", "Hi there", "Fix my code.", "Write a poem."],
    "c": ["Where do you want to go?", None, "Which language is it written in?", "Translate this paragraph into French."],
    "facet": ["destination", None, "programming language", "the language"],
    "reject_reason": [None, "not_clarification", None, "prompt_echo"],
})


def test_rows_are_the_kept_log_pairs_then_the_shipped_demonstrations():
    pairs = training_pairs(fm_log_training_pairs(LOGS))
    assert pairs["origin"].to_list() == ["log", "log"] + ["shipped"] * 6
    assert pairs["query"].to_list()[:2] == ["Plan a trip for me.", "Fix my code."]  # unkept rows (an echo) left out
    shipped = shipped_demonstrations()
    assert shipped.row(0, named=True) == {"query": "Suggest a gift for my coworker.",
                                          "facet": "budget and recipient's hobbies", "origin": "shipped",
                                          "clarifying_question": "What is your budget, and do you know any of "
                                                                 "their hobbies?"}
    assert "How do I install numpy?" in shipped["query"].to_list()  # the refinement prompt's demonstrations too
    rows = sft_rows(pairs, fm_log_training_pairs(LOGS), n_demos=3, seed=0)
    assert len(rows) == 8
    first = rows[0]
    assert json.loads(first["completion"][0]["content"]) == {"facet": "destination",
                                                             "clarifying_question": "Where do you want to go?"}
    user = first["prompt"][-1]["content"]
    assert 'New request: "Plan a trip for me."' in user
    assert 'Request: "Fix my code."' in user and 'Request: "Plan a trip for me."' not in user  # never its own pair


def test_rows_are_what_the_trained_model_is_served():
    """The recorded template renders every row, and a row's prompt is what the facets step sends through the
    transformers backend (its schema instruction appended), so training and serving see the same text."""
    log_pairs = fm_log_training_pairs(LOGS)
    rows = sft_rows(training_pairs(log_pairs), log_pairs, n_demos=3, seed=0)
    template = TrainedTemplate.from_record(fm_log_template().record())
    assert template.values_needed() == ["examples"]
    assert all(template.mismatch(r["prompt"]) is None for r in rows)
    examples = rows[0]["prompt"][-1]["content"].split("like these:\n", 1)[1].split("\n\nNew request", 1)[0]
    served = with_schema(FM_LOG.request({"question": "Plan a trip for me.", "examples": examples}).messages,
                         FM_LOG.schema)
    assert served == rows[0]["prompt"]
    decision = template.parse(rows[0]["completion"][0]["content"])
    assert (decision.action, decision.text) == ("clarify", "Where do you want to go?")
    assert template.parse('{"facet": "", "clarifying_question": "Why?"}').action == "invalid"


def test_a_prompt_without_positive_demonstrations_is_named(monkeypatch):
    """A reworded extraction prompt whose demonstrations no longer parse fails training instead of dropping them."""
    reworded = SimpleNamespace(prompt="clarilm_extract_clarification",
                               template=SimpleNamespace(user="Clarifications (is_clarification = true):\n(none)"))
    monkeypatch.setattr(fm_log_data, "TASKS", {"assistant_asked": reworded})
    with pytest.raises(ValueError, match="clarilm_extract_clarification.txt: no positive demonstration"):
        shipped_demonstrations()
