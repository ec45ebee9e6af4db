"""Dagster wiring, one folder per asset group (assets.py), plus quality/ (GX suites as asset checks)."""
