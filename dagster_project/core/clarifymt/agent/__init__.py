"""Ask-or-answer methods evaluated on ClarifyMT-Bench dialogues (the paper's prompt, baselines, ClarifyAgent)."""
