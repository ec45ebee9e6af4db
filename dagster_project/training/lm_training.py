"""LoRA SFT / DPO of a causal LM with TRL into the model-folder contract (docs/training.md):

assets/training/<name>/adapter/            peft adapter + tokenizer (PeftModel.save_pretrained)
                       init_adapter/       only when training continued another model: the adapter merged into
                                           base_model before this one was trained (clarilm_dpo: clarilm_sft's)
                       model/              merged weights + tokenizer, only with training.merge
                       training.json       name, kind, base_model, base_fingerprint, config, data, final_loss, ...
                       loss_curve.parquet  one row per logged step

Seeded; float32 on CPU (bf16 is emulated on CPUs without avx512_bf16 / AMX), bfloat16 on CUDA. A rerun with the
same config and data is skipped (the folder is kept and touched)."""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from dagster_project.config import TrainingConfig
from dagster_project.core.training.formats import data_sha256
from dagster_project.training.model_folder import (
    LOSS_CURVE,
    building,
    file_sha256,
    folder_fingerprint,
    result_row,
    touch_tree,
    unchanged,
    write_meta,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ADAPTER, INIT_ADAPTER, MERGED = "adapter", "init_adapter", "model"
# merge drift: a fixed prompt set on which base + adapter and the merged weights are compared (training.json)
DRIFT_PROMPTS = ("Tell me about jaguars.", "Which flight should I book to get to the conference?",
                 "How do I reset it?", "The answer is")
STACKING_RULE = ("load base_model; if init_adapter is set, load <folder>/init_adapter onto it and merge it "
                 "(merge_and_unload); then apply <folder>/adapter")


@dataclass(frozen=True)
class LMJob:
    """One model to train: its name, SFT or DPO, its TRL rows, the export they come from, an adapter to start from."""

    name: str
    kind: Literal["sft", "dpo"]
    rows: list[dict[str, Any]]
    data_asset: str
    init_adapter: Path | None = None
    template: dict[str, str] | None = None  # core/training/template.py: recorded in training.json and its config


def device_and_dtype(cfg: TrainingConfig) -> tuple[str, str]:
    """("cpu" | "cuda", "float32" | "bfloat16"): auto picks CUDA when torch sees a GPU."""
    import torch

    device = cfg.device if cfg.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("training.device is cuda but torch sees no GPU (set training.device: cpu or auto)")
    dtype = cfg.dtype if cfg.dtype != "auto" else ("bfloat16" if device == "cuda" else "float32")
    return device, dtype


def base_model_path(model: str, dtype: str) -> str:
    """A local HF folder for a GGUF alias / .gguf path (converted once) or an existing folder; else a hub id as is."""
    from dagster_project.llm.hf_models import hf_model_dir
    from dagster_project.llm.backends.llamacpp import KNOWN_GGUF

    if model in KNOWN_GGUF or model.endswith(".gguf") or Path(model).expanduser().is_dir():
        return str(hf_model_dir(model, dtype).resolve())
    return model


def checkpointing_arg() -> str:
    """The trainer's gradient-checkpointing argument in the installed transformers: `activation_checkpointing` from
    5.23, `gradient_checkpointing` before (the pin admits both, so .venv-vllm's capped transformers trains too)."""
    import transformers

    fields = transformers.TrainingArguments.__dataclass_fields__
    return "activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing"


def trainer_args(job: LMJob, cfg: TrainingConfig, device: str, dtype: str) -> dict[str, Any]:
    """The TRL config arguments (SFTConfig / DPOConfig), recorded verbatim in training.json."""
    s = cfg.sft if job.kind == "sft" else cfg.dpo
    args: dict[str, Any] = {
        "learning_rate": s.learning_rate, "num_train_epochs": s.epochs, "max_steps": s.max_steps,
        "per_device_train_batch_size": s.batch_size, "gradient_accumulation_steps": s.grad_accum,
        "max_length": s.max_length, "seed": cfg.seed, "logging_steps": cfg.logging_steps,
        checkpointing_arg(): cfg.gradient_checkpointing, "use_cpu": device == "cpu",
        "bf16": dtype == "bfloat16", "save_strategy": "no", "report_to": [], "disable_tqdm": True,
        "lr_scheduler_type": s.lr_scheduler, "weight_decay": s.weight_decay,
    }
    if job.kind == "sft":
        args["completion_only_loss"] = True
        if cfg.sft.packing:  # rows packed best-fit into max_length sequences, batches without padding
            args["packing"] = True
    else:
        args["beta"] = cfg.dpo.beta
    return args


def merge_drift(model: Any, tok: Any, prompts: tuple[str, ...] = DRIFT_PROMPTS) -> tuple[Any, dict[str, Any]]:
    """Merge the trained adapter into the weights: (merged model, the largest logit difference between base + adapter
    and the merged weights over `prompts`' tokens). A bf16 merge rounds the adapter into the weights; this says how much
    serving a merged model (vLLM, `merge: true`, the transformers backend's merge at load) departs from training's."""
    import torch

    model.eval()
    enc = tok(list(prompts), return_tensors="pt", padding=True).to(model.device)
    with torch.inference_mode():
        before = model(**enc).logits.float()
    merged = model.merge_and_unload()
    with torch.inference_mode():
        after = merged(**enc).logits.float()
    real = enc["attention_mask"].bool()
    return merged, {"max_abs_logit_diff": (before - after).abs()[real].max().item(),
                    "max_abs_logit": before.abs()[real].max().item(),
                    "dtype": str(next(merged.parameters()).dtype).removeprefix("torch."),
                    "prompts": len(prompts), "tokens": int(real.sum())}


def loss_callback(name: str, curve: list[dict[str, Any]]):
    """A TrainerCallback that appends every logged step to `curve` (one loss-curve row) and prints a progress line."""
    from transformers import TrainerCallback

    class LossLog(TrainerCallback):
        t0 = time.monotonic()

        def on_train_begin(self, args, state, control, **kwargs):
            self.t0 = time.monotonic()

        def on_log(self, args, state, control, logs=None, **kwargs):
            logs = logs or {}
            if "loss" not in logs:  # the end-of-training summary has train_loss instead
                return
            row = {"step": state.global_step, "epoch": state.epoch,
                   **{k: float(v) for k, v in logs.items() if isinstance(v, int | float) and k != "epoch"},
                   "elapsed_s": round(time.monotonic() - self.t0, 3)}  # steady-state tokens/s between two rows
            curve.append(row)
            print(f"[training/{name}] step {state.global_step}/{state.max_steps} loss {row['loss']:.4f}", flush=True)

    return LossLog()


class NoUsableRows(Exception):
    """The trainer's own preprocessing left no example (e.g. every row longer than max_length)."""


def _train(job: LMJob, cfg: TrainingConfig, base: str, device: str, dtype: str, out: Path,
           curve: list[dict[str, Any]]) -> dict[str, Any]:
    """Train into `out` (adapter/, init_adapter/, model/); returns the trainer's numbers."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig, PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer, set_seed
    from trl import DPOConfig, DPOTrainer, SFTConfig, SFTTrainer

    set_seed(cfg.seed)
    tok = AutoTokenizer.from_pretrained(base)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(base, dtype=getattr(torch, dtype))
    if job.init_adapter is not None:
        model = PeftModel.from_pretrained(model, str(job.init_adapter)).merge_and_unload()
        shutil.copytree(job.init_adapter, out / INIT_ADAPTER)
    if device == "cuda":
        model = model.to("cuda")
    lora = LoraConfig(r=cfg.lora.r, lora_alpha=cfg.lora.alpha, lora_dropout=cfg.lora.dropout,
                      target_modules=list(cfg.lora.target_modules), task_type="CAUSAL_LM")
    args = trainer_args(job, cfg, device, dtype)
    common = {"model": model, "train_dataset": Dataset.from_list(job.rows), "processing_class": tok,
              "peft_config": lora, "callbacks": [loss_callback(job.name, curve)]}
    if job.kind == "sft":
        trainer = SFTTrainer(args=SFTConfig(output_dir=str(out / "trainer"), **args), **common)
    else:  # no ref_model: with a peft model DPOTrainer uses the adapter switched off as the reference
        trainer = DPOTrainer(args=DPOConfig(output_dir=str(out / "trainer"), **args), **common)
    if len(trainer.train_dataset) == 0:
        s = cfg.sft if job.kind == "sft" else cfg.dpo
        raise NoUsableRows(f"{job.data_asset}: the {job.kind.upper()} trainer kept none of its {len(job.rows)} rows "
                           f"(TRL drops an example whose reply lies beyond training.{job.kind}.max_length="
                           f"{s.max_length} tokens; raise it): no model folder written")
    t0 = time.monotonic()
    result = trainer.train()
    train_s = time.monotonic() - t0
    shutil.rmtree(out / "trainer", ignore_errors=True)
    trainer.model.save_pretrained(out / ADAPTER)
    tok.save_pretrained(out / ADAPTER)
    merged, drift = merge_drift(trainer.model, tok)
    if cfg.merge:
        merged.save_pretrained(out / MERGED)
        tok.save_pretrained(out / MERGED)
    tokens = next((int(r["num_tokens"]) for r in reversed(curve) if "num_tokens" in r), None)
    return {"steps": int(result.global_step), "train_loss": float(result.training_loss), "train_s": train_s,
            "merge_drift": drift,
            "tokens": tokens, "tokens_per_s": round(tokens / train_s, 1) if tokens and train_s > 0 else None}


def train_lm(job: LMJob, cfg: TrainingConfig, root: Path) -> dict[str, Any]:
    """Train `job` into root/<name>/ (or skip it: no rows, or nothing changed); returns its result row."""
    import peft
    import torch
    import transformers
    import trl

    folder = root / job.name
    if not job.rows:
        return result_row(job.name, job.kind, "skipped_no_data", job.data_asset, 0,
                          f"{job.data_asset} has no training rows: no model folder written")
    device, dtype = device_and_dtype(cfg)
    base = base_model_path(cfg.base_model, dtype)
    sha = data_sha256(job.rows)
    s = cfg.sft if job.kind == "sft" else cfg.dpo
    config = {"kind": job.kind, "base_model": cfg.base_model, "device": device, "dtype": dtype,
              "lora": cfg.lora.model_dump(), job.kind: s.model_dump(), "merge": cfg.merge,
              "init_adapter_sha256": file_sha256(job.init_adapter / "adapter_model.safetensors")
              if job.init_adapter else None,
              "trainer_args": trainer_args(job, cfg, device, dtype), "template": job.template}
    fingerprint = folder_fingerprint(Path(base))
    required = (ADAPTER, LOSS_CURVE, *([MERGED] if cfg.merge else []))
    kept = unchanged(folder, config | {"base_fingerprint": fingerprint}, sha, required)
    if kept is not None:
        touch_tree(folder)
        print(f"[training/{job.name}] unchanged config and data: kept {folder}", flush=True)
        return result_row(job.name, job.kind, "skipped_unchanged", job.data_asset, len(job.rows),
                          "same config and data sha256 as the stored model", kept, folder)
    print(f"[training/{job.name}] {job.kind} on {len(job.rows)} rows of {job.data_asset}, base {base} ({device}, "
          f"{dtype})", flush=True)
    t0 = time.monotonic()
    curve: list[dict[str, Any]] = []
    try:
        with building(folder) as tmp:
            stats = _train(job, cfg, base, device, dtype, tmp, curve)
            meta = {"name": job.name, "kind": job.kind, "base_model": base, "base_fingerprint": fingerprint,
                    "config": config | {"base_fingerprint": fingerprint},
                    "data": {"asset": job.data_asset, "rows": len(job.rows), "sha256": sha},
                    "init_adapter": INIT_ADAPTER if job.init_adapter else None,
                    "init_adapter_source": str(job.init_adapter) if job.init_adapter else None,
                    "stacking": STACKING_RULE, "merged": cfg.merge, "template": job.template,
                    "final_loss": curve[-1]["loss"] if curve else None, **stats,
                    "wall_s": round(time.monotonic() - t0, 1),
                    "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                                 "trl": trl.__version__, "peft": peft.__version__}}
            write_meta(tmp, meta, curve)
    except NoUsableRows as err:
        print(f"[training/{job.name}] {err}", flush=True)
        return result_row(job.name, job.kind, "skipped_no_data", job.data_asset, len(job.rows), str(err))
    print(f"[training/{job.name}] done: {meta['steps']} steps, final loss {meta['final_loss']}, "
          f"{meta['wall_s']} s -> {folder}", flush=True)
    return result_row(job.name, job.kind, "trained", job.data_asset, len(job.rows), None, meta, folder)
