"""clarify-pipeline: clarification data for LLM assistants, as one Dagster asset graph (see docs/architecture.md)."""
