"""With llm.roles["extractor:fm_log"] naming training/fm_log, the facets group's FM-LOG step is served from that
folder (its base + adapter, resolved as the transformers backend resolves it) while the logs group's extraction keeps
the prompted `extractor` (issue 27.7). Scripted backends: no model is loaded."""

import json

import polars as pl

from dagster_project.config import LLMConfig
from dagster_project.core.clarilm.extraction import extract
from dagster_project.core.clarilm.facets import fm_log
from dagster_project.llm.client import LLMClient
from dagster_project.llm.trained import served_model
from tests.fakes import ScriptedBackend

QUESTIONS = pl.DataFrame({"question_id": ["q1"], "question": ["Plan a trip."], "question_source": ["ql"]})
PAIRS = pl.DataFrame({"query": ["Fix my code."], "facet": ["language"], "clarifying_question": ["Which language?"]})
CANDIDATE = pl.DataFrame([{"candidate_id": "c:1", "conversation_id": "c", "turn_index": 1, "source": "assistant_asked",
                           "log_file": "f.json", "log_date": None, "query": "Fix my code.",
                           "clarifying_question": "Which language?", "reply": "Python."}])


def _folder(root):
    folder = root / "assets" / "training" / "fm_log"
    (folder / "adapter").mkdir(parents=True)
    (folder / "adapter" / "adapter_config.json").write_text("{}")
    (root / "base").mkdir()
    (folder / "training.json").write_text(json.dumps({"name": "fm_log", "base_model": str(root / "base")}))
    return folder


def test_the_fm_log_role_is_served_by_the_trained_folder_and_extraction_is_not(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = _folder(tmp_path)
    trained = ScriptedBackend(lambda job, i: json.dumps({"facet": "destination", "clarifying_question": "Where to?"}))
    prompted = ScriptedBackend(lambda job, i: json.dumps({"is_clarification": False}))
    loaded = []

    def transformers(cfg):  # what TransformersBackend loads first: the folder's base and adapters
        loaded.append(served_model(cfg.model))
        return trained

    config = LLMConfig.model_validate({
        "cache_path": str(tmp_path / "cache.sqlite"),
        "roles": {"default": {"backend": "llamacpp", "model": "m.gguf"},
                  "extractor:fm_log": {"backend": "transformers", "model": "training/fm_log"}}})
    client = LLMClient(config, backends={"transformers": transformers, "llamacpp": lambda cfg: prompted})
    facets = fm_log(client.chat, QUESTIONS, PAIRS, k=2, n_demos=1, temperature=0.7, top_p=0.9)
    extracted = extract(client.chat, CANDIDATE)
    assert facets["model"].unique().to_list() == ["training/fm_log"]  # the rows say which FM-LOG ran
    assert facets.filter(pl.col("kept"))["facet"].to_list() == ["destination"]
    assert [a.resolve() for a in loaded[0].adapters] == [(folder / "adapter").resolve()]
    assert len(trained.jobs) == 1 and "New request: \"Plan a trip.\"" in trained.jobs[0].messages[-1]["content"]
    assert extracted["model"].to_list() == ["m.gguf"] and len(prompted.jobs) == 1
