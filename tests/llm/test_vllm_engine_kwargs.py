"""vllm_engine_kwargs: float32 on CPUs without native bfloat16 (no vLLM import needed: on_cpu is given)."""

from dagster_project.llm.backends.vllm import cpu_lacks_bf16, vllm_engine_kwargs

AVX2 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n"
SAPPHIRE = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16\n"


def test_cpu_flags():
    assert cpu_lacks_bf16(AVX2) and not cpu_lacks_bf16(SAPPHIRE)
    assert not cpu_lacks_bf16("processor\t: 0\n")  # no flags line (e.g. ARM): leave vLLM's choice alone


def test_float32_only_on_a_cpu_without_bf16_and_never_over_a_given_dtype():
    base = {"max_model_len": 2048}
    assert vllm_engine_kwargs(base, on_cpu=True, cpuinfo=AVX2) == {"max_model_len": 2048, "dtype": "float32"}
    assert vllm_engine_kwargs(base, on_cpu=True, cpuinfo=SAPPHIRE) == base
    assert vllm_engine_kwargs(base, on_cpu=False, cpuinfo=AVX2) == base  # GPUs keep vLLM's default
    given = {"dtype": "bfloat16"}
    assert vllm_engine_kwargs(given, on_cpu=True, cpuinfo=AVX2) == given
    assert base == {"max_model_len": 2048}  # the role's own dict is not modified


def _fake_adapter(folder, r: int) -> None:
    """A peft-layout adapter with one module (no model needed): config + A (r x 6) and B (5 x r)."""
    import json

    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    m = "base_model.model.model.layers.0.self_attn.q_proj"
    save_file({f"{m}.lora_A.weight": torch.ones(r, 6), f"{m}.lora_B.weight": torch.ones(5, r)},
              str(folder / "adapter_model.safetensors"))
    (folder / "adapter_config.json").write_text(json.dumps({"r": r, "lora_alpha": 2 * r,
                                                            "target_modules": ["q_proj"]}))


def test_lora_rank_setting_rounds_up_to_a_value_vllm_accepts(tmp_path):
    import pytest

    from dagster_project.llm.backends.vllm import lora_rank_setting

    for r, want in ((1, 1), (4, 8), (8, 8), (12, 16), (320, 320)):
        _fake_adapter(tmp_path / str(r), r)
        assert lora_rank_setting(tmp_path / str(r)) == want
    _fake_adapter(tmp_path / "huge", 600)
    with pytest.raises(ValueError, match="huge: LoRA rank 600 is above vLLM's largest"):
        lora_rank_setting(tmp_path / "huge")


def test_trained_stack_becomes_one_adapter_below_clarify_home(tmp_path, monkeypatch):
    import json

    from dagster_project.llm.backends.vllm import lora_adapter
    from dagster_project.llm.identity import served_fingerprint
    from dagster_project.llm.lora_stack import adapter_rank
    from dagster_project.llm.trained import served_model

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CLARIFY_HOME", str(tmp_path / "home"))
    for name, r, init in (("sft", 2, None), ("dpo", 4, "training/sft")):
        _fake_adapter(tmp_path / "assets/training" / name / "adapter", r)
        (tmp_path / "assets/training" / name / "training.json").write_text(
            json.dumps({"base_model": "some/base", "init_adapter": init}))
    sft = served_model("training/sft").adapters
    assert lora_adapter("training/sft", sft) == sft[0]  # one adapter: loaded as it is
    out = lora_adapter("training/dpo", served_model("training/dpo").adapters)
    fp = served_fingerprint("training/dpo")
    assert fp != "missing" and out == tmp_path / "home/.cache/adapters" / f"dpo-{fp}"
    assert adapter_rank(out) == 6
