"""Headline tables and the report index, read from the warehouse after a run."""
