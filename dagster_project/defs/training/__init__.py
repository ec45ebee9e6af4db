"""Group `training`: TRL LoRA SFT / DPO and a sentence-transformers re-ranker on the pipeline's exports."""
