"""ClariLM's SFT baselines as training assets: each reads its annotations exports, records the ClariLM template and
lists every export it learned from for held_out_disjoint (nothing is trained here)."""

from pathlib import Path

import pytest

from dagster_project.config import load_params, parse_params
from dagster_project.defs.training.assets import CLARILM_BASELINES, build
from dagster_project.training.exports import model_template, trained_on


@pytest.mark.parametrize("name", sorted(CLARILM_BASELINES))
def test_each_variant_is_an_asset_reading_its_exports_with_the_clarilm_template_and_its_held_out_list(name):
    params = parse_params({"training": {"models": [name]}})
    (a,) = build(params).assets
    assert {k.to_user_string() for k in a.keys_by_input_name.values()} == set(CLARILM_BASELINES[name])
    assert trained_on(name) == CLARILM_BASELINES[name]  # what held_out_disjoint reads: every export it learned from
    t = model_template(name, params)
    assert (t.name, t.parser) == ("clarilm", "clarilm_need_clarification")


def test_the_demo_trains_one_baseline_and_the_gpu_preset_all_three_with_clarilm_sft_settings():
    repo = Path(__file__).resolve().parents[2]
    demo, gpu = load_params(repo / "params.yaml"), load_params(repo / "params.gpu.yaml")
    assert [m for m in demo.training.models if m in CLARILM_BASELINES] == ["clarilm_sft_external"]
    assert demo.annotations.sft_external and "clarilm_sft_external" in demo.llm.subjects
    # every trained LM that answers users is a subject there (not the re-rankers, the SFT stage or FM-LOG's miner)
    assert set(CLARILM_BASELINES) <= set(gpu.training.models) <= set(gpu.llm.subjects) | {
        "double_turn_sft", "reranker_finetuned", "reranker_generative", "fm_log"}
    sft = gpu.training.for_model("clarilm_sft")
    for name in CLARILM_BASELINES:
        assert gpu.training.for_model(name).sft == sft.sft and gpu.training.for_model(name).lora == sft.lora
