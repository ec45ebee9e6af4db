"""A real tiny LoRA SFT and DPO run (1 step, 64 tokens) on the SmolLM2 HF folder: the model-folder contract, an
adapter that changes the logits, DPO stacked on the SFT adapter (its merged model/ equals the documented loading
rule), a rerun that is skipped, empty data and a failed run that leave no folder behind."""

import json

import polars as pl
import pytest

from dagster_project.config import TrainingConfig
from dagster_project.training import lm_training
from dagster_project.training.lm_training import LMJob, train_lm
from dagster_project.training.model_folder import unchanged

SYSTEM = "Decide whether the request needs clarification."
CFG = TrainingConfig.model_validate({
    "gradient_checkpointing": False,
    "sft": {"max_steps": 1, "max_length": 64, "batch_size": 2, "learning_rate": 1e-3},
    "dpo": {"max_steps": 1, "max_length": 64, "batch_size": 2, "learning_rate": 1e-3},
})


def _sft_rows():
    return [{"prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Tell me about {w}"}],
             "completion": [{"role": "assistant", "content": f"Need clarification: yes\nWhich {w} do you mean?"}]}
            for w in ("jaguar", "mercury")]


def _dpo_rows():
    return [{"prompt": r["prompt"], "chosen": r["completion"],
             "rejected": [{"role": "assistant", "content": "Need clarification: no\nIt is a planet."}]}
            for r in _sft_rows()]


@pytest.fixture(scope="module")
def base():
    from dagster_project.llm.hf_models import hf_model_dir

    return hf_model_dir("smollm2-135m-instruct")  # `make install` extracts the GGUF: a missing one is a failure


@pytest.fixture(scope="module")
def trained(base, tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    sft = train_lm(LMJob("clarilm_sft", "sft", _sft_rows(), "annotations/sft_dataset"), CFG, root)
    dpo = train_lm(LMJob("clarilm_dpo", "dpo", _dpo_rows(), "annotations/dpo_dataset",
                         root / "clarilm_sft" / "adapter"), CFG.model_copy(update={"merge": True}), root)
    return root, sft, dpo


def test_sft_folder_follows_the_contract(trained, base):
    root, sft, _ = trained
    folder = root / "clarilm_sft"
    assert sft["status"] == "trained" and sft["steps"] == 1 and sft["rows"] == 2 and sft["folder"] == str(folder)
    assert (folder / "adapter" / "adapter_model.safetensors").is_file()
    assert (folder / "adapter" / "tokenizer_config.json").is_file()
    assert not (folder / "model").exists() and not (folder / "init_adapter").exists()  # merge: false
    meta = json.loads((folder / "training.json").read_text())
    assert meta["name"] == "clarilm_sft" and meta["kind"] == "sft" and meta["base_model"] == str(base.resolve())
    assert meta["data"] == {"asset": "annotations/sft_dataset", "rows": 2, "sha256": sft["data_sha256"]}
    assert meta["config"]["trainer_args"]["completion_only_loss"] is True
    assert meta["config"]["trainer_args"]["use_cpu"] is True and meta["config"]["trainer_args"]["bf16"] is False
    assert meta["config"]["lora"]["r"] == 8 and meta["base_fingerprint"]
    assert set(meta["versions"]) == {"torch", "transformers", "trl", "peft"}
    curve = pl.read_parquet(folder / "loss_curve.parquet")
    assert {"step", "epoch", "loss", "learning_rate"} <= set(curve.columns) and curve["step"].to_list() == [1]
    assert meta["final_loss"] == pytest.approx(curve["loss"][-1]) and meta["final_loss"] > 0
    assert not list(root.glob(".clarilm_sft.*"))  # no partial folder left


def test_adapter_changes_the_logits(trained, base):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root, _, _ = trained
    tok = AutoTokenizer.from_pretrained(base)
    ids = tok("Tell me about jaguar", return_tensors="pt")
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    with torch.no_grad():
        before = model(**ids).logits
        after = PeftModel.from_pretrained(model, str(root / "clarilm_sft" / "adapter"))(**ids).logits
    assert (after - before).abs().max().item() > 1e-4


def test_dpo_stacks_on_the_sft_adapter_and_logs_rewards(trained):
    root, _, dpo = trained
    folder = root / "clarilm_dpo"
    assert dpo["status"] == "trained" and dpo["kind"] == "dpo"
    meta = json.loads((folder / "training.json").read_text())
    assert meta["init_adapter"] == "init_adapter" and (folder / "init_adapter" / "adapter_model.safetensors").is_file()
    assert meta["config"]["init_adapter_sha256"] and meta["config"]["trainer_args"]["beta"] == 0.1
    assert "merge" in meta["stacking"] and (folder / "adapter" / "adapter_model.safetensors").is_file()
    curve = pl.read_parquet(folder / "loss_curve.parquet")
    assert {"rewards/chosen", "rewards/rejected", "rewards/margins"} <= set(curve.columns)


def test_merged_model_equals_the_stacking_rule(trained, base):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = trained[0] / "clarilm_dpo"
    assert (folder / "model" / "config.json").is_file() and (folder / "model" / "tokenizer_config.json").is_file()
    ids = AutoTokenizer.from_pretrained(base)("Tell me about mercury", return_tensors="pt")
    stacked = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
                                        str(folder / "init_adapter")).merge_and_unload()
    stacked = PeftModel.from_pretrained(stacked, str(folder / "adapter"))
    merged = AutoModelForCausalLM.from_pretrained(folder / "model", dtype=torch.float32)
    with torch.no_grad():
        assert torch.allclose(stacked(**ids).logits, merged(**ids).logits, atol=1e-3)


def test_rerun_with_same_config_and_data_is_skipped_and_any_change_is_not(trained):
    root, sft, _ = trained
    stamp = (root / "clarilm_sft" / "training.json").read_text()
    again = train_lm(LMJob("clarilm_sft", "sft", _sft_rows(), "annotations/sft_dataset"), CFG, root)
    assert again["status"] == "skipped_unchanged" and again["final_loss"] == sft["final_loss"]
    assert (root / "clarilm_sft" / "training.json").read_text() == stamp
    meta = json.loads(stamp)
    required = ("adapter", "loss_curve.parquet")
    assert unchanged(root / "clarilm_sft", meta["config"], meta["data"]["sha256"], required) is not None
    assert unchanged(root / "clarilm_sft", meta["config"], "0" * 64, required) is None
    assert unchanged(root / "clarilm_sft", {**meta["config"], "seed": 1}, meta["data"]["sha256"], required) is None
    assert unchanged(root / "clarilm_sft", meta["config"], meta["data"]["sha256"], ("model",)) is None


def test_empty_export_writes_no_folder(tmp_path):
    row = train_lm(LMJob("single_turn_dpo", "dpo", [], "double_turn/dpo_single_turn"), CFG, tmp_path)
    assert row["status"] == "skipped_no_data" and "no training rows" in row["reason"]
    assert not (tmp_path / "single_turn_dpo").exists()


def test_a_failed_run_keeps_the_last_good_folder(trained, monkeypatch):
    root, _, _ = trained
    before = (root / "clarilm_sft" / "training.json").read_text()

    def boom(job, cfg, base, device, dtype, out, curve):
        (out / "adapter").mkdir()
        raise RuntimeError("killed mid-training")

    monkeypatch.setattr(lm_training, "_train", boom)
    rows = [*_sft_rows(), _sft_rows()[0]]  # new data: not skipped
    with pytest.raises(RuntimeError, match="killed"):
        train_lm(LMJob("clarilm_sft", "sft", rows, "annotations/sft_dataset"), CFG, root)
    assert (root / "clarilm_sft" / "training.json").read_text() == before
    assert not list(root.glob(".clarilm_sft.*"))


def test_rows_the_trainer_drops_entirely_give_skipped_no_data(base, tmp_path):
    """TRL drops an example whose reply lies beyond max_length (found on the demo's 600-token intents prompts): the
    model is skipped with the key to raise, and no folder is written."""
    long_prompt = [{"role": "system", "content": SYSTEM + " " + "Consider every intent carefully. " * 40},
                   {"role": "user", "content": "Where is my order?"}]
    rows = [{"prompt": long_prompt, "completion": [{"role": "assistant", "content": "track_order"}]}] * 2
    row = train_lm(LMJob("intents_tuned", "sft", rows, "intents/training_conversations"), CFG, tmp_path)
    assert row["status"] == "skipped_no_data" and "training.sft.max_length=64" in row["reason"], row
    assert not (tmp_path / "intents_tuned").exists()
