"""Fine-tune the local MiniLM bi-encoder (ClariMM's fine-tuned re-ranker baseline family) with sentence-transformers
on (query, positive, hard BM25 negative) triplets, MultipleNegativesRankingLoss (in-batch negatives), on CPU.
The folder assets/training/reranker_finetuned/ is a sentence-transformers model plus training.json and
loss_curve.parquet; a rerun with the same config and data is skipped."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from dagster_project.config import TrainingConfig
from dagster_project.core.training.formats import data_sha256
from dagster_project.llm.embedder import encoder_path
from dagster_project.training.lm_training import device_and_dtype, loss_callback
from dagster_project.training.model_folder import (
    LOSS_CURVE,
    building,
    folder_fingerprint,
    result_row,
    touch_tree,
    unchanged,
    write_meta,
)

NAME = "reranker_finetuned"


def _train(rows: list[dict[str, str]], cfg: TrainingConfig, device: str, out: Path,
           curve: list[dict[str, Any]], base: str) -> dict[str, Any]:
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
        losses,
    )
    from transformers import set_seed

    set_seed(cfg.seed)
    r = cfg.reranker
    model = SentenceTransformer(base, device=device)
    model.max_seq_length = r.max_length
    cols = ["anchor", "positive", "negative"] if all(x["negative"] for x in rows) else ["anchor", "positive"]
    data = Dataset.from_list([{c: x[c] for c in cols} for x in rows])
    args = SentenceTransformerTrainingArguments(
        output_dir=str(out / "trainer"), learning_rate=r.learning_rate, num_train_epochs=r.epochs,
        max_steps=r.max_steps, per_device_train_batch_size=r.batch_size, seed=cfg.seed,
        logging_steps=cfg.logging_steps, save_strategy="no", report_to=[], disable_tqdm=True,
        use_cpu=device == "cpu")
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=data,
                                         loss=losses.MultipleNegativesRankingLoss(model),
                                         callbacks=[loss_callback(NAME, curve)])
    t0 = time.monotonic()
    result = trainer.train()
    train_s = time.monotonic() - t0
    shutil.rmtree(out / "trainer", ignore_errors=True)
    model.save(str(out))
    return {"steps": int(result.global_step), "train_loss": float(result.training_loss), "train_s": train_s,
            "columns": cols}


def train_reranker(rows: list[dict[str, str]], cfg: TrainingConfig, root: Path, data_asset: str,
                   encoder: str = "all-MiniLM-L6-v2") -> dict[str, Any]:
    """Train `encoder` (params.yaml embedder.model) into root/reranker_finetuned/ (or skip: no rows, or nothing
    changed); returns its result row."""
    import sentence_transformers
    import torch
    import transformers

    folder = root / NAME
    if not rows:
        return result_row(NAME, "bi_encoder", "skipped_no_data", data_asset, 0,
                          f"{data_asset} has no kept train-split rows: no model folder written")
    device, _ = device_and_dtype(cfg)
    sha = data_sha256(rows)
    base = encoder_path(encoder)
    config = {"kind": "bi_encoder", "base_model": encoder, "device": device, "seed": cfg.seed,
              "reranker": cfg.reranker.model_dump(), "loss": "MultipleNegativesRankingLoss",
              "base_fingerprint": folder_fingerprint(Path(base))}
    kept = unchanged(folder, config, sha, ("config.json", LOSS_CURVE))
    if kept is not None:
        touch_tree(folder)
        return result_row(NAME, "bi_encoder", "skipped_unchanged", data_asset, len(rows),
                          "same config and data sha256 as the stored model", kept, folder)
    t0 = time.monotonic()
    curve: list[dict[str, Any]] = []
    with building(folder) as tmp:
        stats = _train(rows, cfg, device, tmp, curve, base)
        meta = {"name": NAME, "kind": "bi_encoder", "base_model": base, "base_fingerprint": config["base_fingerprint"],
                "config": config, "data": {"asset": data_asset, "rows": len(rows), "sha256": sha},
                "final_loss": curve[-1]["loss"] if curve else None, **stats,
                "wall_s": round(time.monotonic() - t0, 1),
                "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                             "sentence_transformers": sentence_transformers.__version__}}
        write_meta(tmp, meta, curve)
    return result_row(NAME, "bi_encoder", "trained", data_asset, len(rows), None, meta, folder)
