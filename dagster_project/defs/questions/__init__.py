"""Group `questions` (ClariLM §3.3.1-3.3.2): Q^L from the logs' first questions, personas, Q^G."""
