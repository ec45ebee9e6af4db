"""params.yaml `training` and the GPU preset: validated, papers' settings where they are named."""

from pathlib import Path

import pytest

from dagster_project.config import MODEL_NAMES, ParamsError, load_params, parse_params

REPO = Path(__file__).resolve().parents[2]


def test_demo_params_train_every_model_briefly_on_cpu():
    t = load_params(REPO / "params.yaml").training
    assert t.device == "cpu" and t.base_model == "smollm2-135m-instruct"
    # ClariLM's other SFT baselines and the FM-LOG miner (docs/fm-log.md): params.gpu.yaml trains them
    opt_in = {"clarilm_sft_ql", "clarilm_sft_full", "fm_log"}
    assert list(t.models) == [m for m in MODEL_NAMES if m not in opt_in]  # every other model, in order
    assert 0 < t.sft.max_steps <= 10 and 0 < t.dpo.max_steps <= 10  # the demo must stay short on 2 cores
    assert t.lora.r == 8 and t.dpo.beta == 0.1


def test_gpu_preset_names_a_real_model_bf16_cuda_each_papers_settings_and_a_fair_reference():
    demo, gpu = load_params(REPO / "params.yaml"), load_params(REPO / "params.gpu.yaml")
    t = gpu.training
    assert t.device == "cuda" and t.dtype == "bfloat16" and "7B" in t.base_model
    sft, dpo = t.for_model("clarilm_sft"), t.for_model("clarilm_dpo")  # ClariLM §4.5
    assert (sft.sft.epochs, sft.sft.lr_scheduler, sft.sft.learning_rate, sft.sft.batch_size * sft.sft.grad_accum,
            sft.lora.r) == (1.0, "cosine", 1e-4, 32, 8)
    assert (dpo.dpo.beta, dpo.dpo.learning_rate, dpo.dpo.batch_size * dpo.dpo.grad_accum) == (0.1, 1e-5, 16)
    fm = t.for_model("fm_log")  # ClariLM §4.5 trains FM-LOG with the same SFT settings
    assert "fm_log" in t.models and (fm.sft.learning_rate, fm.sft.lr_scheduler, fm.sft.batch_size * fm.sft.grad_accum,
                                     fm.lora.r) == (1e-4, "cosine", 32, 8)
    dt = t.for_model("double_turn_dpo")  # double-turn App. B
    assert (dt.dpo.learning_rate, dt.dpo.batch_size * dt.dpo.grad_accum) == (5e-6, 32)
    it = t.for_model("intents_tuned_p85")  # intents App. B, sweep models included
    assert (it.lora.r, it.lora.dropout, it.sft.learning_rate, it.sft.epochs, it.sft.weight_decay) == \
        (16, 0.2, 2e-4, 3.0, 0.001)
    assert all(m.sft.max_steps == -1 and m.dpo.max_steps == -1 for m in (sft, dpo, dt, it))  # whole epochs
    ref = gpu.llm.subjects[gpu.evaluation.trained_baseline]  # the reference is the training base, served the same way
    assert ref.model == t.base_model and ref.backend == "transformers"
    assert all(gpu.llm.subjects[s].engine_kwargs == ref.engine_kwargs for s, r in gpu.trained_pairs())
    assert gpu.benchmark == demo.benchmark and gpu.intents == demo.intents


def test_per_model_settings_are_validated_naming_the_key():
    with pytest.raises(ParamsError, match=r"training\.per_model\.clarilm_sft"):
        parse_params({"training": {"per_model": {"clarilm_sft": {"sft": {"epochs": -1}}}}})
    assert parse_params({}).training.for_model("clarilm_sft") == parse_params({}).training


@pytest.mark.parametrize("training, key", [
    ({"models": ["clarilm_sft", "gpt5_tuned"]}, "training.models.1"),
    ({"device": "tpu"}, "training.device"),
    ({"lora": {"rank": 8}}, "training.lora.rank"),
    ({"sft": {"max_steps": 0.5}}, "training.sft.max_steps"),
])
def test_a_wrong_training_key_fails_naming_it(training, key):
    with pytest.raises(ParamsError, match=key.replace(".", r"\.")):
        parse_params({"training": training})
