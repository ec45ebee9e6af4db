"""Group `facets` (ClariLM §3.2, CFD): FM-LOG samples, FM-LLM brainstorm, fusion with semantic dedup."""
