"""Pure paper methods, one package per paper (no Dagster, no I/O, a model only through a chat callable)."""
