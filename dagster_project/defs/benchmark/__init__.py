"""Group `benchmark`: ClarifyMT-Bench construction (taxonomy -> single-turn queries -> persona dialogues)."""
