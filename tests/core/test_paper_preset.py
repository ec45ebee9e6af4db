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
