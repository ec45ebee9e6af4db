"""Group `intents`: intent classification with clarification (simulated conversations, SDRS, curation)."""
