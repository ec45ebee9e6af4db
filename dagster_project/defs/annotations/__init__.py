"""Group `annotations` (ClariLM §3.3.3-3.3.5, OFS): CoTAP, preference pairs, SFT / DPO exports for TRL.
