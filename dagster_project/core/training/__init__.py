"""Training data for the `training` group: each pipeline export as TRL rows, the data hash, the intents sweep
subsets and the re-ranker triplets. Pure: records in, records out (no Dagster, no model)."""
