"""dvc.yaml is generated from the group registry and cannot drift from the code: the committed file equals what
`clarify dvc-stages` generates, every module a stage's group imports lies under one of the stage's deps, and
editing one prompt file changes only the stages whose assets use it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dagster_project.config import load_params
from dagster_project.runs.dvc_stages import closure, code_deps, group_roots

REPO = Path(__file__).resolve().parents[1]
STAGES = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
HEADLINE_STAGE = STAGES.pop("metrics")  # not a group: `clarify metrics` reads the groups' tables


def uncovered(files: set[Path], deps: list[str]) -> list[str]:
    dep_paths = [REPO / d for d in deps]
    return sorted(str(f.relative_to(REPO)) for f in files
                  if not any(f == d or d in f.parents for d in dep_paths))


def test_committed_dvc_yaml_is_what_the_registry_generates():
    """`clarify dvc-stages --check` (the CLI a developer runs) passes on the committed file."""
    r = subprocess.run([sys.executable, "-m", "dagster_project.cli", "dvc-stages", "--check"], cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


def test_check_fails_on_a_stale_file(tmp_path):
    from dagster_project.runs.dvc_stages import check_or_write

    stale = tmp_path / "dvc.yaml"
    stale.write_text((REPO / "dvc.yaml").read_text().replace("clarify materialize logs", "clarify materialize lgs"))
    ok, message = check_or_write(stale, load_params(REPO / "params.yaml"), check=True)
    assert not ok and "clarify dvc-stages" in message
    ok, _ = check_or_write(stale, load_params(REPO / "params.yaml"), check=False)
    assert ok and stale.read_text() == (REPO / "dvc.yaml").read_text()


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_stage_deps_cover_the_import_closure(stage):
    spec = STAGES[stage]
    assert spec["cmd"] == f"clarify materialize {stage}", "one stage per group, named after it"
    files = closure(group_roots(stage), stage)
    assert files, stage
    assert uncovered(files, spec["deps"]) == [], f"dvc.yaml stage {stage!r} misses deps for these modules"


def test_no_stage_depends_on_every_prompt():
    """Prompts are deps one file at a time, only where a group's assets use them; llm/ code is listed file by file."""
    prompts = {p.name for p in (REPO / "dagster_project/llm/prompts").glob("*.txt")}
    for name, spec in STAGES.items():
        assert "dagster_project/llm" not in spec["deps"] and "dagster_project/llm/prompts" not in spec["deps"], name
        used = {Path(d).name for d in spec["deps"] if d.startswith("dagster_project/llm/prompts/") and d.endswith(".txt")}
        assert used < prompts, name
    users = {p: [n for n, s in STAGES.items() if f"dagster_project/llm/prompts/{p}" in s["deps"]] for p in prompts}
    assert all(users.values()), f"prompt files no stage uses: {[p for p, u in users.items() if not u]}"
    assert users["judge_question.txt"] == ["evaluation"]


def test_closure_sees_relative_and_package_imports():
    """The closure follows `from pkg import module` and package __init__ files: a drift the test would catch."""
    files = closure(group_roots("facets"), "facets")
    names = {str(f.relative_to(REPO)) for f in files}
    assert "dagster_project/core/clarilm/facets.py" in names
    assert "dagster_project/llm/task.py" in names and "dagster_project/config/llm.py" in names
    assert not any(n.startswith("dagster_project/defs/intents/") for n in names)
    assert uncovered(files, ["dagster_project/defs", "dagster_project/lib"]) != []
    assert "dagster_project/llm/task.py" in code_deps(files)


def test_headline_stage_depends_on_the_package_and_every_group_it_reads():
    """`clarify metrics` is cheap, so its code dep is the whole package; its data deps are the groups it reads."""
    from dagster_project.reporting.headline import SOURCE_GROUPS

    assert HEADLINE_STAGE["cmd"] == "clarify metrics"
    assert "dagster_project" in HEADLINE_STAGE["deps"]
    assert sorted(d for d in HEADLINE_STAGE["deps"] if d.startswith("assets/")) == sorted(
        f"assets/{g}" for g in SOURCE_GROUPS)


def test_bytecode_beside_the_code_is_not_a_change_of_the_deps():
    """Python writes __pycache__/ into the package folders the stages depend on (unless PYTHONDONTWRITEBYTECODE is
    set): DVC must not see it, or a second `dvc repro` reruns every stage whose modules a later stage compiled."""
    pyc = "dagster_project/lib/__pycache__/warehouse.cpython-311.pyc"
    r = subprocess.run([sys.executable, "-m", "dvc", "check-ignore", pyc, "dagster_project/lib/warehouse.py"],
                       cwd=REPO, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "DVC_NO_ANALYTICS": "1"})
    assert r.stdout.split() == [pyc], r.stdout + r.stderr
