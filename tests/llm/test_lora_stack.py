"""llm/lora_stack.py: an SFT adapter and a DPO adapter trained on top of it become one adapter whose output equals
the transformers backend's merge of both (base + SFT merged, then DPO merged), on the real SmolLM2 folder."""

import json
from pathlib import Path

import pytest
import torch

from dagster_project.llm.backends.transformers import load_model
from dagster_project.llm.hf_models import hf_model_dir
from dagster_project.llm.lora_stack import AdapterStackError, adapter_rank, stack_adapters
from dagster_project.llm.trained import served_model


@pytest.fixture(scope="module")
def base_dir() -> Path:
    return hf_model_dir("smollm2-135m-instruct").resolve()


def save_adapter(base_dir: Path, folder: Path, seed: int, r: int, targets: list[str], rslora: bool = False,
                 alpha: int = 16) -> None:
    """A random LoRA adapter (A and B both non-zero) with the tokenizer, as the training group saves one."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    get_peft_model(model, LoraConfig(r=r, lora_alpha=alpha, target_modules=targets, init_lora_weights=False,
                                     use_rslora=rslora)).save_pretrained(folder)
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(folder)


def trained(root: Path, name: str, base_dir: Path, init_adapter: str | None = None) -> None:
    meta = {"name": name, "base_model": str(base_dir), "init_adapter": init_adapter}
    (root / "assets/training" / name / "training.json").write_text(json.dumps(meta))


def test_stacked_adapter_equals_merging_both(base_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sft, dpo = tmp_path / "assets/training/sft/adapter", tmp_path / "assets/training/dpo/adapter"
    # different ranks, target modules and scaling rules: the stack pads modules an adapter does not target
    save_adapter(base_dir, sft, seed=1, r=4, targets=["q_proj", "v_proj"])
    save_adapter(base_dir, dpo, seed=2, r=2, targets=["v_proj", "o_proj"], rslora=True)
    trained(tmp_path, "sft", base_dir)
    trained(tmp_path, "dpo", base_dir, init_adapter="training/sft")
    served = served_model("training/dpo")
    out = stack_adapters(served.adapters, tmp_path / "stack")
    assert adapter_rank(out) == 6 and (out / "tokenizer.json").is_file()
    assert stack_adapters(served.adapters, out) == out  # built once

    merged, tok = load_model(served, "cpu", "float32")  # what the transformers backend serves
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    stacked = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32), str(out))
    base_only = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    ids = tok(["Which flight should I book?", "The answer is"], return_tensors="pt", padding=True)
    with torch.inference_mode():
        want, got, base = (m(**ids).logits for m in (merged, stacked, base_only))
    assert (want - base).abs().max() > 0.1  # the adapters change the model
    assert torch.allclose(got, want, atol=1e-3), (got - want).abs().max()


def test_unsupported_adapter_is_named(tmp_path):
    folder = tmp_path / "a"
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps({"r": 2, "lora_alpha": 4, "use_dora": True,
                                                            "target_modules": ["q_proj"]}))
    with pytest.raises(AdapterStackError, match=r"a/adapter_config.json: field 'use_dora'"):
        stack_adapters([folder, folder], tmp_path / "out")
