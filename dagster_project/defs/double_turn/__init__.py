"""Group `double_turn`: double-turn preference labelling and answer-set F1 evaluation (Zhang, Knox & Choi).
