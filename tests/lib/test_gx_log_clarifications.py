"""The log_clarifications suite agrees with the extractor's rules: an `ok` clarification rejected as a prompt echo
is not kept, and that is consistent (the demo's logs stage failed on it before the rule named reject_reason)."""

from __future__ import annotations

import dataclasses

import polars as pl

from dagster_project.config import parse_params
from dagster_project.defs.quality.checks import SUITES_DIR, load_suite, validate_frame

PARAMS = parse_params({})


def _consistency_suite():
    suite = load_suite(SUITES_DIR / "logs.log_clarifications.yaml")
    rule = [e for e in suite.expectations if (e.name or "").startswith("kept only when ok")]
    assert len(rule) == 1
    return dataclasses.replace(suite, expectations=rule)


def _frame(kept: list[bool], reasons: list[str | None]) -> pl.DataFrame:
    n = len(kept)
    return pl.DataFrame({"candidate_id": [f"c{i}" for i in range(n)], "status": ["ok"] * n,
                         "is_clarification": [True] * n, "kept": kept, "reject_reason": reasons})


def test_a_prompt_echo_that_is_not_kept_is_consistent():
    ok, meta = validate_frame(_frame([True, False], [None, "prompt_echo"]), _consistency_suite(), PARAMS)
    assert ok, meta


def test_an_unkept_clarification_without_a_reason_fails():
    ok, _ = validate_frame(_frame([True, False], [None, None]), _consistency_suite(), PARAMS)
    assert not ok
