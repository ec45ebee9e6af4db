"""Data quality: Great Expectations suites in expectations/ as Dagster asset checks."""
