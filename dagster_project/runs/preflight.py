"""Checks made before anything runs, each problem named by its params key: every input file the params point
at, where the LLM cache would be created, each role's model or endpoint. Used by `clarify doctor` (all groups) and `clarify materialize`
(its group). Nothing here creates or writes a file."""

from __future__ import annotations

import glob
import importlib.util
import os
import urllib.error
import urllib.request
from pathlib import Path

from dagster_project.config import Params, RoleConfig
from dagster_project.defs.registry import GROUPS

GLOB_CHARS = frozenset("*?[")


def input_paths(p: Params) -> list[tuple[str, str, str]]:
    """(group, dotted params key, path or glob) of every input file the registered groups read (defs/registry.py);
    unset optional ones left out."""
    return [(g.name, key, value) for g in GROUPS for key, value in g.inputs(p) if value]


def input_problems(p: Params, group: str | None = None) -> list[str]:
    """One line per missing input (of ``group``, or of every group): the params key, the path, what is wrong.
    A glob may match nothing as long as the list it belongs to (e.g. logs.paths) matches some file."""
    problems: list[str] = []
    lists: dict[str, list[tuple[str, str]]] = {}
    for owner, key, value in input_paths(p):
        if group is not None and owner != group:
            continue
        if GLOB_CHARS & set(value):
            lists.setdefault(key.split("[")[0], []).append((key, value))
        elif not Path(value).exists():
            problems.append(f"{key}: {value} not found")
        elif not Path(value).is_file():
            problems.append(f"{key}: {value} is not a file")
    for key, patterns in lists.items():
        if not any(Path(f).is_file() for _, pattern in patterns for f in glob.glob(pattern, recursive=True)):
            problems.append(f"{key}: no file matches {[pattern for _, pattern in patterns]}")
    return problems


def cache_problem(cache_path: str | Path) -> str | None:
    """Why the LLM cache cannot live at ``cache_path`` (llm.cache_path), or None; creates no folder."""
    path = Path(cache_path)
    if path.exists():
        return None if path.is_file() else f"llm.cache_path: {path} exists and is not a file"
    ancestor = path.parent.absolute()
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"llm.cache_path: {path} cannot be created: {ancestor} is a file"
    if not os.access(ancestor, os.W_OK | os.X_OK):
        return f"llm.cache_path: {path} cannot be created: {ancestor} is not writable"
    return None


def _transformers_check(cfg: RoleConfig) -> tuple[str, str | None]:
    """A trained model's folder (adapter + base, or merged), a local HF folder, or a GGUF converted on first use."""
    from dagster_project.llm.trained import TrainedModelMissing, served_model

    if importlib.util.find_spec("transformers") is None:
        return "transformers not installed", "transformers is not installed (make install)"
    try:
        served = served_model(cfg.model)
    except TrainedModelMissing as err:  # not a problem before the training group ran: it builds the folder
        return f"not built yet ({err})", None
    except ValueError as err:
        return "bad model name", str(err)
    weights = "merged weights" if not served.adapters and cfg.model.startswith("training/") else served.weights
    return f"{weights}{f' + {len(served.adapters)} LoRA adapter(s)' if served.adapters else ''}", None


def role_check(cfg: RoleConfig, timeout_s: float) -> tuple[str, str | None]:
    """(what was found, the problem or None) for one role's model: the GGUF file, the vllm package, or the
    endpoint (GET /models within ``timeout_s``; a missing key or an HTTP 401/403 is a problem). Never shows a key."""
    if cfg.backend == "llamacpp":
        from dagster_project.llm.backends.llamacpp import resolve_gguf, trained_parts
        from dagster_project.llm.trained import TrainedModelMissing

        if importlib.util.find_spec("llama_cpp") is None:
            return "llama_cpp not installed", "llama-cpp-python is not installed (make install)"
        if cfg.model.startswith("training/"):  # its base GGUF + its adapters as a llama.cpp adapter (lora_gguf.py)
            try:
                served, base = trained_parts(cfg.model)
            except TrainedModelMissing as err:  # not a problem before the training group ran: it builds the folder
                return f"not built yet ({err})", None
            except (ValueError, FileNotFoundError) as err:
                return "trained model: no GGUF base", str(err)
            return f"trained model: {base.name} + {len(served.adapters)} LoRA adapter(s)", None
        try:
            path = resolve_gguf(cfg.model)
        except FileNotFoundError as err:
            return "GGUF file missing", str(err)
        return f"GGUF file {path.name} ({path.stat().st_size / 1e6:.0f} MB)", None
    if cfg.backend == "transformers":
        return _transformers_check(cfg)
    if cfg.backend == "vllm":
        if cfg.model.startswith("training/"):  # its base + one LoRARequest per subject (llm/backends/vllm.py)
            found, problem = _transformers_check(cfg)
            if problem:
                return f"trained model: {found}", problem
            where = f"trained model: {found}"
        else:
            where = "local folder" if Path(cfg.model).is_dir() else "model id (vLLM loads it at start)"
        if importlib.util.find_spec("vllm") is None:
            return f"vllm not installed here; {where}", "vllm is not installed (pip install '.[gpu]')"
        return f"vllm installed; {where}", None
    if importlib.util.find_spec("openai") is None:
        return "openai not installed", "the openai package is not installed"
    headers = {}
    if cfg.api_key_env:
        if not os.environ.get(cfg.api_key_env):
            return "no key", f"environment variable {cfg.api_key_env} (api_key_env) is not set"
        headers["Authorization"] = f"Bearer {os.environ[cfg.api_key_env]}"
    probes = [_probe(base, headers, timeout_s) for base in cfg.endpoints]
    if len(probes) == 1:
        return probes[0]
    problems = [problem for _, problem in probes if problem]  # a pool: every server must answer
    return f"pool of {len(probes)}: {len(probes) - len(problems)} reachable", "; ".join(problems) or None


def _probe(base: str, headers: dict[str, str], timeout_s: float) -> tuple[str, str | None]:
    """GET <base>/models: (what was found, problem or None)."""
    url = base.rstrip("/") + "/models"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout_s) as r:
            return f"reachable (GET /models: HTTP {r.status})", None
    except urllib.error.HTTPError as err:
        problem = f"{base} refuses the key (HTTP {err.code})" if err.code in (401, 403) else None
        return f"answers HTTP {err.code} on GET /models", problem
    except (OSError, ValueError) as err:
        reason = getattr(err, "reason", None) or err
        return "unreachable", f"{base} unreachable within {timeout_s:g} s ({type(reason).__name__}: {str(reason)[:80]})"
