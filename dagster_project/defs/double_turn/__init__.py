"""Group `double_turn`: double-turn vs single-turn preference labels from simulated users, answer-set F1."""
