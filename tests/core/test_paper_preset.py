"""The paper-scale preset (params.paper.yaml) and params files that extend another."""

from pathlib import Path

import pytest
import yaml

from dagster_project.config import ParamsError, load_params

REPO = Path(__file__).resolve().parents[2]


def test_paper_preset_sets_the_papers_sizes_on_top_of_params_yaml():
    demo, paper = load_params(REPO / "params.yaml"), load_params(REPO / "params.paper.yaml")
    assert paper.benchmark.n_per_subtype == 85 and paper.benchmark.subtypes is None
    assert (paper.evaluation.vote_k, paper.evaluation.intent_k) == (5, 5)
    assert paper.evaluation.judge_per_subtype == 30 and paper.evaluation.max_dialogues is None
    assert paper.evaluation.pairwise_items == 100
    assert sorted(g.share for g in paper.benchmark.generators) == [0.25, 0.25, 0.5]
    # everything the preset does not set comes from params.yaml
    assert paper.llm == demo.llm and paper.evaluation.methods == demo.evaluation.methods
    assert paper.benchmark.seed_dataset == demo.benchmark.seed_dataset
    assert paper.logs == demo.logs


def test_loop_preset_trains_clarilm_sft_and_scores_it_against_its_base_on_held_out_sets():
    demo, loop = load_params(REPO / "params.yaml"), load_params(REPO / "params.loop.yaml")
    assert loop.training.models == ["clarilm_sft"] and loop.training.sft.max_steps == -1
    assert loop.questions.max_selected is None and 0 < loop.questions.test_fraction < 1
    assert loop.evaluation.datasets == ["clarilm_test", "in3"] and loop.evaluation.trained_datasets is None
    assert loop.evaluation.trained_baseline == demo.evaluation.trained_baseline == "smollm2"
    assert loop.evaluation.external["in3"].path == "data/external/in3_test.jsonl"
    assert (REPO / loop.evaluation.external["in3"].path).is_file()
    assert loop.llm == demo.llm  # same models and backends as the demo: only sizes and the trained model list change


def _write(path, data):
    path.write_text(yaml.safe_dump(data))
    return path


def test_extends_merges_mappings_and_replaces_lists(tmp_path):
    _write(tmp_path / "base.yaml", {"benchmark": {"n_per_subtype": 2, "subtypes": ["lexical", "scope"],
                                                  "dedup_tau": 0.6}})
    p = load_params(_write(tmp_path / "over.yaml", {"extends": "base.yaml",
                                                     "benchmark": {"n_per_subtype": 7, "subtypes": ["goal"]}}))
    assert (p.benchmark.n_per_subtype, p.benchmark.subtypes, p.benchmark.dedup_tau) == (7, ["goal"], 0.6)


def test_extends_errors_name_the_file(tmp_path):
    with pytest.raises(ParamsError, match="missing.yaml: file not found"):
        load_params(_write(tmp_path / "a.yaml", {"extends": "missing.yaml"}))
    _write(tmp_path / "b.yaml", {"extends": "c.yaml"})
    with pytest.raises(ParamsError, match="makes a cycle"):
        load_params(_write(tmp_path / "c.yaml", {"extends": "b.yaml"}))
    with pytest.raises(ParamsError, match=r"(?s)over.yaml: .*benchmark.n_per_subtype"):
        _write(tmp_path / "base.yaml", {})
        load_params(_write(tmp_path / "over.yaml", {"extends": "base.yaml", "benchmark": {"n_per_subtype": 0}}))


def _max_chars(schema: dict) -> int:
    """An upper bound of the characters of any JSON value the schema admits (keys, quotes and separators included)."""
    t = schema.get("type")
    if "enum" in schema:
        return max(len(str(v)) for v in schema["enum"]) + 2
    if t == "string":
        return schema["maxLength"] + 2
    if t == "array":
        return 2 + schema["maxItems"] * (_max_chars(schema["items"]) + 2)
    if t == "object":
        return 2 + sum(len(k) + 4 + _max_chars(v) for k, v in schema["properties"].items())
    if t in ("boolean", "integer"):
        return 5
    raise AssertionError(schema)


def test_paper_preset_budgets_leave_no_reply_cut():
    """Issue 27.3: larger budgets than the demo's, and no agent JSON reply can reach its budget (one token per
    character is the worst case of any tokenizer)."""
    from dagster_project.core.clarifymt.agent.modules import TASKS

    demo, paper = load_params(REPO / "params.yaml").evaluation, load_params(REPO / "params.paper.yaml").evaluation
    for key in ("subject_max_tokens", "reasoning_max_tokens", "agent_max_tokens"):
        assert getattr(paper, key) >= 1024 and getattr(paper, key) > getattr(demo, key), key
    for module, task in TASKS.items():
        assert _max_chars(task.schema) <= paper.agent_max_tokens, module
