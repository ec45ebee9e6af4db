"""Model training with TRL/peft and the trained-model folder: I/O and models, no Dagster."""
