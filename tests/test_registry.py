"""The group registry is the one list of groups: definitions, DVC stages, preflight and the report index follow it,
and a new group is one package plus one registry line (docs/add-a-paper.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from dagster_project.config import Params
from dagster_project.defs.registry import GROUPS

REPO = Path(__file__).resolve().parents[1]

TOY_ASSETS = '''
"""A toy group: one asset that reads nothing and writes two rows."""
import polars as pl

from dagster_project.lib.assets import group_asset

asset = group_asset("toy")


@asset
def toy_rows() -> pl.DataFrame:
    return pl.DataFrame({"text": ["a", "b"], "score": [0.25, 0.75]})
'''
TOY_GROUP = '''
"""Registry entry of the toy group."""
import dagster as dg

from dagster_project.defs.toy import assets
from dagster_project.lib.groups import GroupSpec
from dagster_project.lib.headlines import pick
from dagster_project.lib.warehouse import read_asset

GROUP = GroupSpec(
    name="toy",
    build=lambda _p: dg.Definitions(assets=dg.load_assets_from_modules([assets])),
    params=("llm",),
    inputs=lambda _p: [("toy.path", "data/toy_input.csv")],
    headlines=lambda base: [("toy scores", pick(read_asset(base, "toy", "toy_rows"), ["text"], lambda c: c == "score"))],
    metrics=("toy", lambda base: {"rows": 2}),
)
'''
PROBE = '''
import json, sys
from pathlib import Path
import polars as pl
import dagster as dg
from dagster_project.config import Params
from dagster_project.definitions import build_definitions
from dagster_project.runs.dvc_stages import build_stages
from dagster_project.runs.preflight import input_problems
from dagster_project.reporting.report_index import sections
from dagster_project.reporting.headline import HEADLINES

p = Params()
defs = build_definitions(p)
keys = [k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys() if k.path[0] == "toy"]
stage = build_stages(p)["stages"].get("toy")
Path("assets/toy").mkdir(parents=True)
pl.DataFrame({"text": ["a", "b"], "score": [0.25, 0.75]}).write_parquet("assets/toy/toy_rows.parquet")
sec = [s for s in sections("assets") if s.group == "toy"]
print(json.dumps({"keys": keys, "stage": stage, "problems": input_problems(p, "toy"),
                  "headlines": [c for c, _ in sec[0].headlines] if sec else None, "metrics": "toy" in HEADLINES}))
'''


def test_registry_names_each_group_package_once():
    names = [g.name for g in GROUPS]
    packages = sorted(p.parent.name for p in (REPO / "dagster_project/defs").glob("*/group.py"))
    assert len(names) == len(set(names))
    assert sorted(names) == packages, "every defs/<group>/group.py must have its line in defs/registry.py"


def test_definitions_hold_exactly_the_registered_groups():
    from dagster_project.definitions import group_definitions

    defs = group_definitions(Params())
    groups = {spec.group_name for a in defs.assets or [] for spec in a.specs}
    assert groups == {g.name for g in GROUPS}


def test_a_new_group_is_one_package_and_one_line(tmp_path):
    """Copy the project, add defs/toy/ (assets.py, group.py) and its registry line: the toy group shows up in the
    Dagster definitions, the generated DVC stages, preflight and the report index, with nothing else edited."""
    shutil.copytree(REPO / "dagster_project", tmp_path / "dagster_project",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "expectations", tmp_path / "expectations")
    toy = tmp_path / "dagster_project/defs/toy"
    toy.mkdir()
    (toy / "__init__.py").write_text("")
    (toy / "assets.py").write_text(textwrap.dedent(TOY_ASSETS))
    (toy / "group.py").write_text(textwrap.dedent(TOY_GROUP))
    registry = tmp_path / "dagster_project/defs/registry.py"
    text = registry.read_text()
    text = text.replace("from dagster_project.lib.groups import GroupSpec",
                        "from dagster_project.defs.toy.group import GROUP as toy\n"
                        "from dagster_project.lib.groups import GroupSpec")
    text = text.replace("    headlines,\n)", "    headlines, toy,\n)")
    assert "toy,\n)" in text, "the registry's GROUPS tuple changed shape: update this test's one-line edit"
    registry.write_text(text)
    r = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(tmp_path), "CLARIFY_PARAMS": "none.yaml"})
    assert r.returncode == 0, r.stderr[-3000:]
    found = json.loads(r.stdout.strip().splitlines()[-1])
    assert found["keys"] == ["toy/toy_rows"]
    assert found["stage"]["cmd"] == "clarify materialize toy"
    assert "dagster_project/defs/toy" in found["stage"]["deps"] and "data/toy_input.csv" in found["stage"]["deps"]
    assert found["stage"]["params"] == ["llm"] and found["stage"]["outs"] == [{"assets/toy": {"persist": True}}]
    assert found["problems"] == ["toy.path: data/toy_input.csv not found"]
    assert found["headlines"] == ["toy scores"] and found["metrics"] is True

