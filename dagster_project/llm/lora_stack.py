"""One LoRA adapter for a stacked trained model (DPO trained on base + the merged SFT adapter), for vLLM and llama.cpp,
which apply one adapter.

A LoRA adapter adds s * B @ A to a weight; merging SFT and then DPO adds s1 * B1 @ A1 + s2 * B2 @ A2, which is exactly
one adapter of rank r1 + r2: A = [s1 * A1; s2 * A2], B = [B1, B2], scaling 1 (peft's `add_weighted_adapter(...,
combination_type="cat")` builds the same, but only on the loaded base model - 15 GB for a 7B - and in its dtype).
Here the adapters' own safetensors are concatenated in their stored dtype; no base model is loaded.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from dagster_project.config.home import home_path

CONFIG, WEIGHTS = "adapter_config.json", "adapter_model.safetensors"
STACKS_DIR = ".cache/adapters"  # below CLARIFY_HOME: stacks and llama.cpp adapter files, built once per fingerprint
UNSUPPORTED = ("use_dora", "modules_to_save", "rank_pattern", "alpha_pattern", "target_parameters")


class AdapterStackError(ValueError):
    """An adapter this module cannot combine exactly (named with its file and field)."""


def adapter_rank(folder: Path) -> int:
    """The LoRA rank `r` in a peft adapter folder's adapter_config.json."""
    return int(json.loads((folder / CONFIG).read_text())["r"])


def adapter_scaling(cfg: dict, path: Path) -> float:
    """peft's factor on B @ A (alpha / r, or alpha / sqrt(r) with rsLoRA); refuses what is not plain LoRA."""
    for field in UNSUPPORTED:
        if cfg.get(field):
            raise AdapterStackError(f"{path / CONFIG}: field {field!r} is set; only plain LoRA adapters can be stacked")
    r, alpha = int(cfg["r"]), float(cfg["lora_alpha"])
    return alpha / r ** 0.5 if cfg.get("use_rslora") else alpha / r


def lora_modules(tensors: dict, path: Path) -> dict[str, tuple]:
    """{module prefix: (A, B)} from an adapter's tensors; any other tensor is refused by name."""
    pairs: dict[str, dict[str, object]] = {}
    for key, t in tensors.items():
        for part in ("lora_A", "lora_B"):
            if key.endswith(f".{part}.weight"):
                pairs.setdefault(key[: -len(f".{part}.weight")], {})[part] = t
                break
        else:
            raise AdapterStackError(f"{path / WEIGHTS}: tensor {key!r} is not a LoRA A/B weight; cannot stack it")
    return {m: (p["lora_A"], p["lora_B"]) for m, p in pairs.items()}


def stack_adapters(adapters: Sequence[Path], out: Path) -> Path:
    """Write one adapter into `out` whose weight delta is the sum of `adapters`' deltas (rank: the sum of theirs;
    a module that an adapter does not target gets zeros there). Written to a sibling and renamed: a killed build
    leaves no half adapter. The tokenizer files of the last adapter are copied along."""
    import torch
    from safetensors.torch import load_file, save_file

    if (out / WEIGHTS).is_file():
        return out
    configs = [json.loads((a / CONFIG).read_text()) for a in adapters]
    parts = [(adapter_scaling(c, a), int(c["r"]), lora_modules(load_file(a / WEIGHTS), a))
             for c, a in zip(configs, adapters)]
    total = sum(r for _, r, _ in parts)
    merged: dict[str, torch.Tensor] = {}
    for module in sorted({m for _, _, mods in parts for m in mods}):
        blocks_a, blocks_b = [], []
        for scale, r, mods in parts:
            if module in mods:
                a, b = mods[module]
                blocks_a.append(a * scale)
                blocks_b.append(b)
            else:
                ref_a, ref_b = next(mods[module] for _, _, mods in parts if module in mods)
                blocks_a.append(ref_a.new_zeros(r, ref_a.shape[1]))
                blocks_b.append(ref_b.new_zeros(ref_b.shape[0], r))
        merged[f"{module}.lora_A.weight"] = torch.cat(blocks_a, dim=0).contiguous()
        merged[f"{module}.lora_B.weight"] = torch.cat(blocks_b, dim=1).contiguous()
    if not all(isinstance(c.get("target_modules"), list) for c in configs):
        raise AdapterStackError(f"{adapters}: target_modules must be lists of module names to be stacked")
    targets = sorted({t for c in configs for t in c["target_modules"]})
    config = {**configs[-1], "r": total, "lora_alpha": total, "use_rslora": False, "target_modules": targets,
              "rank_pattern": {}, "alpha_pattern": {}}
    tmp = out.with_name(f".{out.name}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(adapters[-1], tmp, ignore=shutil.ignore_patterns(CONFIG, WEIGHTS, "README.md"))
    save_file(merged, str(tmp / WEIGHTS), metadata={"format": "pt"})
    (tmp / CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        tmp.rename(out)
    except OSError:  # another process built the same stack first
        shutil.rmtree(tmp, ignore_errors=True)
        if not (out / WEIGHTS).is_file():
            raise
    return out


def lora_adapter(model: str, adapters: tuple[Path, ...]) -> Path:
    """The one adapter folder served for a trained model (vLLM, llama.cpp): its adapter, or its stack built once,
    named by the fingerprint of the base and the adapters it stacks (not of a merged folder beside them)."""
    if len(adapters) == 1:
        return adapters[0]
    from dagster_project.llm.identity import served_fingerprint
    from dagster_project.llm.trained import training_name

    name = f"{training_name(model)}-{served_fingerprint(model, merged=False)}"
    return stack_adapters(adapters, home_path(STACKS_DIR) / name)
