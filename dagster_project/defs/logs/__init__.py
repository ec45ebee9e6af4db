"""Group `logs` (ClariLM §3.2.1): chat logs -> one row per turn, the clarification prefilter, LLM extraction.
