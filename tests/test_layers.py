"""Imports point down only (ARCHITECTURE §2): a module may import its own layer or a lower one, never a higher one,
including imports inside functions (ast.walk sees every import statement)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dagster_project.runs.dvc_stages import PACKAGE, ROOT, imported

# lowest first; packages on one rank may import each other
LAYERS: dict[str, int] = {
    "config": 0, "io": 1, "llm": 2, "core": 3, "training": 4, "lib": 4, "defs": 5, "definitions": 6,
    "runs": 7, "reporting": 7, "cli": 8,
}


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "<package>"


def modules(root: Path = ROOT) -> list[tuple[str, Path]]:
    out = []
    for f in sorted((root / PACKAGE).rglob("*.py")):
        rel = f.relative_to(root).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        out.append((name, f))
    return out


def upward_imports(root: Path = ROOT) -> list[str]:
    bad = []
    for name, path in modules(root):
        src = layer_of(name)
        if src not in LAYERS:
            continue
        for target in imported(path, name, root):
            dst = layer_of(target)
            if dst in LAYERS and LAYERS[dst] > LAYERS[src]:
                bad.append(f"{path.relative_to(root)} ({src}) imports {target} ({dst})")
    return sorted(set(bad))


def test_every_top_level_package_has_a_layer():
    tops = {layer_of(n) for n, _ in modules()} - {"<package>", "__main__"}
    assert tops <= set(LAYERS), f"give these packages a layer in LAYERS: {sorted(tops - set(LAYERS))}"


def test_imports_point_down_only():
    assert upward_imports() == []


def test_the_check_sees_an_import_inside_a_function(tmp_path):
    """A planted upward import hidden in a function body is reported (the check can fail)."""
    pkg = tmp_path / PACKAGE
    for sub in ("config", "defs"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "defs" / "x.py").write_text("")
    (pkg / "config" / "bad.py").write_text("def f():\n    from dagster_project.defs import x\n")
    assert upward_imports(tmp_path) == [
        f"{PACKAGE}/config/bad.py (config) imports {PACKAGE}.defs (defs)",
        f"{PACKAGE}/config/bad.py (config) imports {PACKAGE}.defs.x (defs)",
    ]


@pytest.mark.parametrize("module", ["dagster_project.config", "dagster_project.core.shared.dedup"])
def test_lower_layers_do_not_pull_in_dagster_definitions(module):
    """config/ and core/ import without building the graph (no defs/, definitions or runs module loaded)."""
    import subprocess
    import sys

    code = (f"import sys, {module}; bad = [m for m in sys.modules if m.startswith(('dagster_project.defs', "
            "'dagster_project.definitions', 'dagster_project.runs'))]; print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
