"""`clarify sql`, `summary` and `--help` start without Dagster and the group registry (~2 s of imports): the
commands that need them import them when they run."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

HEAVY = ("dagster", "dagster_project.defs.registry", "dagster_project.runs.preflight", "sklearn", "torch",
         "great_expectations")


def test_importing_the_cli_leaves_dagster_and_the_registry_unloaded():
    code = ("import sys, dagster_project.cli; "
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


@pytest.mark.parametrize("command", ["plan", "materialize"])
def test_the_commands_that_run_dagster_still_find_it(command, tmp_path):
    """`plan` and `materialize` of an unknown group get through their deferred imports (preflight, the run
    machinery, Dagster's instance) to the registry's answer."""
    out = subprocess.run([sys.executable, "-m", "dagster_project.cli", command, "no_such_group"], cwd=REPO,
                         capture_output=True, text=True, env={**os.environ, "DAGSTER_HOME": str(tmp_path)})
    assert out.returncode == 1, out.stdout + out.stderr
    assert "no assets in group 'no_such_group'" in out.stdout
