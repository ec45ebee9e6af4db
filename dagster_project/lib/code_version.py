"""`code_version` per asset: a hash of its defs module, the core packages its code reaches, and the prompt
templates its LLM steps use, so the Dagster UI flags an asset stale after an edit to any of them.

The prompts an asset uses are found by walking what its compute function references (functions, classes,
module attributes, registries) down to the LLMTask objects; only this project's code is walked."""

from __future__ import annotations

import hashlib
import importlib
import inspect
import sys
import types
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import dagster as dg

from dagster_project.llm.prompts import Prompt
from dagster_project.llm.task import LLMTask

PACKAGE = "dagster_project"
PROMPTS_DIR = Path(__file__).resolve().parents[1] / "llm" / "prompts"


def _ours(module: str | None) -> bool:
    return bool(module) and (module == PACKAGE or module.startswith(PACKAGE + "."))


def _names(code: types.CodeType) -> Iterator[str]:
    """Every global/attribute name a code object (and the functions nested in it) mentions."""
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _names(const)


def _children(obj: Any) -> Iterable[Any]:
    """What one object of this project leads to: a function's globals, closures and defaults; a decorated
    function's original; a class' members; a container's items; an instance's attributes."""
    if isinstance(obj, (types.MethodType, staticmethod, classmethod)):
        return [obj.__func__]
    if callable(obj) and hasattr(obj, "__wrapped__"):  # functools.cache, wraps
        return [obj.__wrapped__]
    if isinstance(obj, property):
        return [obj.fget]
    if isinstance(obj, dict):
        return [*obj.keys(), *obj.values()]
    if isinstance(obj, (list, tuple, set, frozenset)):
        return list(obj)
    if inspect.isfunction(obj):
        if not _ours(obj.__module__):
            return []
        names = set(_names(obj.__code__))
        found = [obj.__globals__[n] for n in names if n in obj.__globals__]
        modules = [m for m in found if isinstance(m, types.ModuleType) and _ours(m.__name__)]
        found += [getattr(m, n) for m in modules for n in names if hasattr(m, n)]  # module.attr
        found += [c.cell_contents for c in obj.__closure__ or () if c.cell_contents is not None]
        return [*found, *(obj.__defaults__ or ()), *(obj.__kwdefaults__ or {}).values()]
    if inspect.isclass(obj):
        return list(vars(obj).values()) if _ours(obj.__module__) else []
    if _ours(type(obj).__module__) and hasattr(obj, "__dict__"):
        return [type(obj), *vars(obj).values()]
    return []


def _walk(fn: Any) -> Iterator[Any]:
    """Every object reachable from ``fn`` (through _children), once each."""
    seen: dict[int, Any] = {}  # holds every visited object, so no id is reused by a later temporary
    stack = [fn]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (str, bytes, int, float, bool, type(None))):
            continue
        seen[id(obj)] = obj
        yield obj
        stack.extend(_children(obj))


def reachable(fn: Any) -> tuple[set[str], set[str]]:
    """(prompt names, project modules) reachable from ``fn``."""
    prompts: set[str] = set()
    modules: set[str] = set()
    for obj in _walk(fn):
        if isinstance(obj, LLMTask):
            prompts.add(obj.prompt)
        elif isinstance(obj, Prompt):
            prompts.add(obj.name)
        if (inspect.isfunction(obj) or inspect.isclass(obj)) and _ours(obj.__module__):
            modules.add(obj.__module__)
    return prompts, modules


def llm_tasks(fn: Any) -> list[LLMTask]:
    """The LLM steps reachable from ``fn`` (their roles and prompts: what `clarify dvc-stages` checks a trained
    role against)."""
    return [obj for obj in _walk(fn) if isinstance(obj, LLMTask)]


def _core_package(module: str) -> str | None:
    """'dagster_project.core.<paper>' for a module inside it, else None."""
    parts = module.split(".")
    return ".".join(parts[:3]) if len(parts) > 2 and parts[1] == "core" else None


def code_files(fn: Any) -> tuple[list[Path], list[str]]:
    """(the defs module's file + every file of each core package reached, prompt names) for ``fn``."""
    prompts, modules = reachable(fn)
    files = {Path(inspect.getfile(fn))}
    for package in {p for m in modules if (p := _core_package(m))}:
        root = Path(importlib.import_module(package).__file__).parent
        files.update(root.rglob("*.py"))
    return sorted(files), sorted(prompts)


def code_version(fn: Any, prompts_dir: Path = PROMPTS_DIR) -> str:
    """sha256 (12 hex) over the code files and prompt templates of one asset's compute function."""
    files, prompts = code_files(fn)
    digest = hashlib.sha256()
    root = Path(sys.modules[PACKAGE].__file__).parent
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    for name in prompts:
        digest.update(name.encode() + b"\0" + (prompts_dir / f"{name}.txt").read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def compute_fn(assets_def: dg.AssetsDefinition) -> Any:
    """The Python function behind an asset (or multi-asset) definition."""
    fn = assets_def.op.compute_fn
    return getattr(fn, "decorated_fn", fn)


def code_versions(assets: Iterable[Any], prompts_dir: Path = PROMPTS_DIR) -> dict[dg.AssetKey, str]:
    """asset key -> code_version for every executable asset definition in ``assets``."""
    out: dict[dg.AssetKey, str] = {}
    for a in assets:
        if isinstance(a, dg.AssetsDefinition) and a.is_executable:
            version = code_version(compute_fn(a), prompts_dir)
            out.update(dict.fromkeys(a.keys, version))
    return out


def with_code_versions(defs: dg.Definitions, prompts_dir: Path = PROMPTS_DIR) -> dg.Definitions:
    """``defs`` with each asset's code_version set from its code and prompts (an explicit one is kept)."""
    versions = code_versions(defs.assets or [], prompts_dir)
    with warnings.catch_warnings():  # Definitions.map_asset_specs is public but marked preview in Dagster 1.13
        warnings.simplefilter("ignore", dg.PreviewWarning)
        return defs.map_asset_specs(
            func=lambda s: s.replace_attributes(code_version=s.code_version or versions.get(s.key)))
