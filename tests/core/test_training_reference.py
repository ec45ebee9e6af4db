"""The fair reference of a trained-vs-base comparison: the training base, same backend, same precision; anything
else is refused naming both (issue 26)."""

import json

from dagster_project.config.llm import RoleConfig
from dagster_project.core.training.reference import reference_problem

TRAINED = RoleConfig(backend="transformers", model="training/clarilm_sft")
SMALL = RoleConfig(backend="transformers", model="smollm2-135m-instruct")


def _trained_on(root, base: str) -> None:
    folder = root / "assets" / "training" / "clarilm_sft"
    folder.mkdir(parents=True)
    (folder / "training.json").write_text(json.dumps({"base_model": f"/cache/{base}-hf", "config": {"base_model": base}}))


def test_a_7b_trained_model_against_the_135m_is_refused_naming_both(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _trained_on(tmp_path, "Qwen/Qwen2.5-7B-Instruct")
    why = reference_problem("clarilm_sft", TRAINED, "smollm2_hf", SMALL, default_base="smollm2-135m-instruct")
    assert why is not None and "'clarilm_sft'" in why and "'smollm2_hf'" in why
    assert "'Qwen/Qwen2.5-7B-Instruct'" in why and "'smollm2-135m-instruct'" in why
    big = RoleConfig(backend="transformers", model="Qwen/Qwen2.5-7B-Instruct")
    assert reference_problem("clarilm_sft", TRAINED, "base_hf", big, default_base="smollm2-135m-instruct") is None


def test_the_base_in_another_backend_or_precision_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no folder yet: the configured training.base_model is the base
    assert reference_problem("clarilm_sft", TRAINED, "smollm2_hf", SMALL, "smollm2-135m-instruct") is None
    gguf = RoleConfig(backend="llamacpp", model="smollm2-135m-instruct")
    assert "served by llamacpp" in reference_problem("clarilm_sft", TRAINED, "smollm2", gguf, "smollm2-135m-instruct")
    bf16 = RoleConfig(backend="transformers", model="smollm2-135m-instruct", engine_kwargs={"dtype": "bfloat16"})
    assert "dtype bfloat16" in reference_problem("clarilm_sft", TRAINED, "smollm2_bf16", bf16, "smollm2-135m-instruct")


def test_two_models_trained_on_the_same_base_are_a_fair_pair(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    dpo = RoleConfig(backend="transformers", model="training/clarilm_dpo")
    assert reference_problem("clarilm_dpo", dpo, "clarilm_sft", TRAINED, "smollm2-135m-instruct") is None


def test_on_llama_cpp_the_reference_must_run_the_same_re_encoding(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    trained = RoleConfig(backend="llamacpp", model="training/clarilm_sft", quantize="q8_0")
    base = RoleConfig(backend="llamacpp", model="smollm2-135m-instruct", quantize="q8_0")
    assert reference_problem("clarilm_sft", trained, "smollm2", base, "smollm2-135m-instruct") is None
    why = reference_problem("clarilm_sft", trained, "smollm2", base.model_copy(update={"quantize": None}),
                            "smollm2-135m-instruct")
    assert "served by llamacpp, quantize none (the file as it is)" in why and "llamacpp, quantize q8_0" in why


def test_a_trained_model_is_served_like_its_reference():
    from dagster_project.config.llm import trained_role

    gguf = RoleConfig(backend="llamacpp", model="smollm2-135m-instruct", quantize="q8_0", n_ctx=4096)
    assert trained_role(gguf, "training/x") == gguf.model_copy(update={"model": "training/x"})
    assert trained_role(SMALL, "training/x").backend == "transformers"
    api = RoleConfig(backend="openai", model="gpt", base_url="http://127.0.0.1:9/v1")
    assert trained_role(api, "training/x").backend == "transformers"  # an endpoint cannot load an adapter folder
    assert trained_role(None, "training/x") == RoleConfig(backend="transformers", model="training/x")
