"""Group `annotations` (ClariLM §3.3.3-3.3.5): CoTAP annotations, preference pairs, SFT / DPO exports for TRL."""
