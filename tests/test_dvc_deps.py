"""dvc.yaml deps cannot drift from the code: every module a stage's group imports (its import closure from
defs/<group>/, plus the entry point the stage runs) lies under one of the stage's deps, so `dvc repro` never
skips a stage whose code changed."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "dagster_project"
GROUPS_PACKAGE = f"{PACKAGE}.defs"


def module_file(name: str) -> Path | None:
    """The file of a project module (package -> its __init__.py), or None outside the project."""
    if name != PACKAGE and not name.startswith(PACKAGE + "."):
        return None
    base = REPO / Path(*name.split("."))
    for cand in (base.with_suffix(".py"), base / "__init__.py"):
        if cand.is_file():
            return cand
    return None


def imported(path: Path, name: str) -> set[str]:
    """Project modules one file imports (absolute and relative, at any depth of the file)."""
    is_pkg = path.name == "__init__.py"
    package = name if is_pkg else name.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)  # `from pkg import module`
    return {m for m in out if module_file(m) is not None}


def closure(roots: list[str], group: str) -> set[Path]:
    """Files reachable from roots, not following into other groups' defs (definitions.py imports them all)."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name.startswith(GROUPS_PACKAGE + ".") and name.split(".")[2] not in (group, "quality"):
            continue
        todo.extend(imported(module_file(name), name))
    for name in list(seen):  # importing a.b.c runs a/__init__.py and a/b/__init__.py too
        parts = name.split(".")
        seen.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return {f for n in seen if (f := module_file(n)) is not None
            and not (n.startswith(GROUPS_PACKAGE + ".") and n.split(".")[2] not in (group, "quality"))}


def group_roots(group: str) -> list[str]:
    folder = REPO / PACKAGE / "defs" / group
    mods = [f"{GROUPS_PACKAGE}.{group}.{p.stem}" if p.stem != "__init__" else f"{GROUPS_PACKAGE}.{group}"
            for p in sorted(folder.glob("*.py"))]
    return [*mods, f"{PACKAGE}.cli", f"{PACKAGE}.definitions"]


STAGES = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
HEADLINE_STAGE = STAGES.pop("metrics")  # not a group: `clarify metrics` reads the groups' tables


def uncovered(files: set[Path], deps: list[str]) -> list[str]:
    dep_paths = [REPO / d for d in deps]
    return sorted(str(f.relative_to(REPO)) for f in files
                  if not any(f == d or d in f.parents for d in dep_paths))


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_stage_deps_cover_the_import_closure(stage):
    spec = STAGES[stage]
    assert spec["cmd"] == f"clarify materialize {stage}", "one stage per group, named after it"
    files = closure(group_roots(stage), stage)
    assert files, stage
    assert uncovered(files, spec["deps"]) == [], f"dvc.yaml stage {stage!r} misses deps for these modules"


def test_closure_sees_relative_and_package_imports(tmp_path):
    """The closure follows `from pkg import module` and package __init__ files: a drift the test would catch."""
    files = closure(group_roots("facets"), "facets")
    names = {str(f.relative_to(REPO)) for f in files}
    assert "dagster_project/core/clarilm/facets.py" in names
    assert "dagster_project/llm/task.py" in names and "dagster_project/config/llm.py" in names
    assert not any(n.startswith("dagster_project/defs/intents/") for n in names)
    assert uncovered(files, ["dagster_project/defs", "dagster_project/llm", "dagster_project/lib"]) != []


def test_headline_stage_depends_on_the_package_and_every_group_it_reads():
    """`clarify metrics` is cheap, so its code dep is the whole package; its data deps are the groups it reads."""
    from dagster_project.lib.headline import SOURCE_GROUPS

    assert HEADLINE_STAGE["cmd"] == "clarify metrics"
    assert "dagster_project" in HEADLINE_STAGE["deps"]
    assert sorted(d for d in HEADLINE_STAGE["deps"] if d.startswith("assets/")) == sorted(
        f"assets/{g}" for g in SOURCE_GROUPS)
