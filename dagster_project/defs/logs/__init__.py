"""Group `logs` (ClariLM FM-LOG step 1): chat logs by day, prefilter, LLM extraction of clarification exchanges."""
