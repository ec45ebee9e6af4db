"""params.yaml `training`: which models the `training` group builds, on which base, with which LoRA / TRL settings."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from dagster_project.config.base import Strict

# fm_log: ClariLM's FM-LOG facet miner (SFT on the logs group's kept extractions), served to the facets group through
# llm.roles["extractor:fm_log"] (docs/fm-log.md)
# clarilm_sft_external / _ql / _full: ClariLM Table 2's SFT baselines (SFT-IN3, SFT-Q^L only, SFT-Full)
ModelName = Literal["clarilm_sft", "clarilm_dpo", "clarilm_sft_external", "clarilm_sft_ql", "clarilm_sft_full",
                    "double_turn_sft", "double_turn_dpo", "single_turn_dpo",
                    "intents_tuned", "reranker_finetuned", "reranker_generative", "fm_log"]
MODEL_NAMES: tuple[str, ...] = ModelName.__args__  # type: ignore[attr-defined]


class LoraSettings(Strict):
    """peft LoRA adapter (ClariLM: rank 8)."""

    r: int = Field(8, gt=0)
    alpha: int = Field(16, gt=0)
    dropout: float = Field(0.05, ge=0.0, lt=1.0)
    target_modules: list[str] = Field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"], min_length=1)


class SFTSettings(Strict):
    """TRL SFTTrainer on prompt/completion rows (loss on the completion only)."""

    learning_rate: float = Field(2e-4, gt=0.0)
    epochs: float = Field(1.0, gt=0.0)
    max_steps: int = Field(-1, ge=-1)          # > 0 caps the optimizer steps; -1: `epochs` decide
    batch_size: int = Field(4, gt=0)
    grad_accum: int = Field(1, gt=0)
    max_length: int = Field(256, gt=8)        # tokens per example (longer ones are truncated)
    # GPU: pack rows best-fit into max_length sequences trained without padding (TRL packing, bfd); off keeps one
    # padded row per example. TRL 1.16's DPOTrainer has no padding-free mode, so DPO has no such key.
    packing: bool = False
    lr_scheduler: Literal["linear", "cosine", "constant"] = "linear"
    weight_decay: float = Field(0.0, ge=0.0)


class DPOSettings(Strict):
    """TRL DPOTrainer on prompt/chosen/rejected rows; the reference model is the adapter switched off."""

    beta: float = Field(0.1, gt=0.0)
    learning_rate: float = Field(5e-5, gt=0.0)
    epochs: float = Field(1.0, gt=0.0)
    max_steps: int = Field(-1, ge=-1)
    batch_size: int = Field(2, gt=0)
    grad_accum: int = Field(1, gt=0)
    max_length: int = Field(256, gt=8)        # prompt + completion tokens (TRL 1.16 DPOConfig has only this one)
    lr_scheduler: Literal["linear", "cosine", "constant"] = "linear"
    weight_decay: float = Field(0.0, ge=0.0)


class RerankerSettings(Strict):
    """sentence-transformers bi-encoder fine-tune of the local MiniLM on (query, positive, BM25 negative) triplets."""

    learning_rate: float = Field(2e-5, gt=0.0)
    epochs: float = Field(1.0, gt=0.0)
    max_steps: int = Field(-1, ge=-1)
    batch_size: int = Field(8, gt=1)          # in-batch negatives need at least two rows per batch
    max_length: int = Field(128, gt=8)


class YesNoRerankerSettings(Strict):
    """The generative yes/no re-ranker (reranker_generative, LoRA SFT on the base model): its rows and its scoring."""

    negatives: int = Field(1, ge=0)            # BM25 negatives ("no") per relevant document ("yes") of a train query
    doc_chars: int = Field(400, gt=0)          # document characters in its prompt (cut at a word boundary)
    batch_size: int = Field(8, gt=0)           # candidates scored per forward pass (retrieval_headline)


class ModelSettings(Strict):
    """One model's own settings (a paper's): keys of `lora` / `sft` / `dpo` that replace the group-wide ones."""

    lora: dict[str, Any] = Field(default_factory=dict)
    sft: dict[str, Any] = Field(default_factory=dict)
    dpo: dict[str, Any] = Field(default_factory=dict)


class TrainingConfig(Strict):
    """The `training` group: base model, device, LoRA, SFT / DPO / re-ranker settings, and the models to build."""

    base_model: str = "smollm2-135m-instruct"  # GGUF alias / .gguf path (converted once), HF folder, or hub id
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"  # auto: float32 on CPU, bfloat16 on CUDA
    seed: int = 0
    gradient_checkpointing: bool = True        # less memory, slower (demo: 3.7 vs 5.2-5.8 GB, +17-23% time)
    logging_steps: int = Field(1, gt=0)        # loss_curve.parquet gets one row per this many steps
    merge: bool = False                        # also write model/ (merged weights) for backends that need them
    lora: LoraSettings = Field(default_factory=LoraSettings)
    sft: SFTSettings = Field(default_factory=SFTSettings)
    dpo: DPOSettings = Field(default_factory=DPOSettings)
    reranker: RerankerSettings = Field(default_factory=RerankerSettings)
    yes_no_reranker: YesNoRerankerSettings = Field(default_factory=YesNoRerankerSettings)
    models: list[ModelName] = Field(default_factory=lambda: list(MODEL_NAMES))
    per_model: dict[ModelName, ModelSettings] = Field(default_factory=dict)
    # held_out_disjoint: an evaluation query and a training text at or above this MiniLM cosine are near-duplicates
    held_out_min_cosine: float = Field(0.9, gt=0.0, le=1.0)

    @model_validator(mode="after")
    def _per_model_valid(self) -> TrainingConfig:
        for name in self.per_model:
            try:
                self.for_model(name)
            except ValueError as err:
                raise ValueError(f"training.per_model.{name}: {err}") from None
        return self

    def for_model(self, name: str) -> TrainingConfig:
        """The settings `name` trains with: per_model's block of the model (an intents sweep model,
        intents_tuned_p<pct>, takes intents_tuned's) over the group-wide lora / sft / dpo."""
        key = name if name in self.per_model else next((k for k in self.per_model if name.startswith(f"{k}_")), None)
        if key is None:
            return self
        own = self.per_model[key]
        return self.model_copy(update={
            "lora": LoraSettings.model_validate(self.lora.model_dump() | own.lora),
            "sft": SFTSettings.model_validate(self.sft.model_dump() | own.sft),
            "dpo": DPOSettings.model_validate(self.dpo.model_dump() | own.dpo)})
