"""The LLM cache and DAGSTER_HOME resolve from CLARIFY_HOME / DVC_ROOT, so DVC experiment copies share them."""

from __future__ import annotations

from pathlib import Path

import pytest

from dagster_project.config.home import dagster_home
from dagster_project.config.llm import LLMConfig


@pytest.fixture
def elsewhere(tmp_path, monkeypatch) -> Path:
    """A working directory like a `dvc exp run --temp` copy (.dvc/tmp/exps/tmpXXXX) inside the project."""
    for var in ("CLARIFY_HOME", "DVC_ROOT", "DAGSTER_HOME"):
        monkeypatch.delenv(var, raising=False)
    work = tmp_path / "project" / ".dvc" / "tmp" / "exps" / "tmpabc"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    return work


def test_relative_cache_path_follows_dvc_root_not_the_workspace(elsewhere, monkeypatch, tmp_path):
    monkeypatch.setenv("DVC_ROOT", str(tmp_path / "project"))  # what DVC sets for --temp / --queue stages
    assert LLMConfig().cache_path == str(tmp_path / "project" / ".cache" / "llm_cache.sqlite")
    assert dagster_home() == tmp_path / "project" / ".dagster"


def test_clarify_home_wins_over_dvc_root(elsewhere, monkeypatch, tmp_path):
    monkeypatch.setenv("DVC_ROOT", str(tmp_path / "project"))
    monkeypatch.setenv("CLARIFY_HOME", str(tmp_path / "state"))
    assert LLMConfig(cache_path="c/llm.sqlite").cache_path == str(tmp_path / "state" / "c" / "llm.sqlite")
    assert dagster_home() == tmp_path / "state" / ".dagster"


def test_absolute_paths_and_explicit_dagster_home_are_kept(elsewhere, monkeypatch, tmp_path):
    monkeypatch.setenv("CLARIFY_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dh"))
    assert LLMConfig(cache_path=str(tmp_path / "abs.sqlite")).cache_path == str(tmp_path / "abs.sqlite")
    assert dagster_home() == tmp_path / "dh"


def test_outside_dvc_the_working_directory_is_home(elsewhere):
    assert LLMConfig().cache_path == str(elsewhere / ".cache" / "llm_cache.sqlite")
    assert dagster_home() == elsewhere / ".dagster"
