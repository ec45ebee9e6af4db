"""params.yaml `training` and the GPU preset: validated, papers' settings where they are named."""

from pathlib import Path

import pytest

from dagster_project.config import MODEL_NAMES, ParamsError, load_params, parse_params

REPO = Path(__file__).resolve().parents[2]


def test_demo_params_train_every_model_briefly_on_cpu():
    t = load_params(REPO / "params.yaml").training
    assert t.device == "cpu" and t.base_model == "smollm2-135m-instruct" and list(t.models) == list(MODEL_NAMES)
    assert 0 < t.sft.max_steps <= 10 and 0 < t.dpo.max_steps <= 10  # the demo must stay short on 2 cores
    assert t.lora.r == 8 and t.dpo.beta == 0.1


def test_gpu_preset_names_a_real_model_bf16_cuda_and_the_clarilm_settings():
    demo, gpu = load_params(REPO / "params.yaml"), load_params(REPO / "params.gpu.yaml")
    t = gpu.training
    assert t.device == "cuda" and t.dtype == "bfloat16" and "7B" in t.base_model
    assert t.dpo.beta == 0.1 and t.dpo.learning_rate == 1e-5 and t.lora.r == 8  # ClariLM
    assert t.sft.max_steps == -1 and t.dpo.max_steps == -1  # whole epochs
    assert gpu.benchmark == demo.benchmark and gpu.intents == demo.intents  # only `training` differs


@pytest.mark.parametrize("training, key", [
    ({"models": ["clarilm_sft", "gpt5_tuned"]}, "training.models.1"),
    ({"device": "tpu"}, "training.device"),
    ({"lora": {"rank": 8}}, "training.lora.rank"),
    ({"sft": {"max_steps": 0.5}}, "training.sft.max_steps"),
])
def test_a_wrong_training_key_fails_naming_it(training, key):
    with pytest.raises(ParamsError, match=key.replace(".", r"\.")):
        parse_params({"training": training})
