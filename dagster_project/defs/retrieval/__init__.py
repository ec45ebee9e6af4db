"""Group `retrieval` (ClariMM): clarification QA -> multi-turn sessions -> inferred queries -> rankers -> metrics."""
