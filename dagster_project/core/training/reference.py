"""The fair reference of a trained-vs-base comparison (issue 26): the model the trained one started from, served by
the same backend in the same precision. Anything else (a 7B + LoRA against the 135M) would credit the training with
the difference between two models."""

from __future__ import annotations

from dagster_project.config.llm import RoleConfig
from dagster_project.llm.trained import configured_base, same_model, training_meta, training_name


def training_base(model: str, default_base: str) -> tuple[str, ...]:
    """The names of the base a model was trained from: training.json's configured base and the folder it resolved
    to; `default_base` (params.yaml training.base_model) when the folder is not built yet. An untrained model is
    its own base."""
    if training_name(model) is None:
        return (model,)
    meta = training_meta(model)
    if meta is None:
        return (default_base,)
    names = [configured_base(meta) or "", str(meta.get("base_model") or "")]
    return tuple(n for n in names if n) or (default_base,)


def _serving(cfg: RoleConfig) -> str:
    if cfg.backend == "llamacpp":  # the GGUF file's own types, or the role's re-encoding of it
        return f"llamacpp, quantize {cfg.quantize or 'none (the file as it is)'}"
    kw = cfg.engine_kwargs
    return f"{cfg.backend}, dtype {kw.get('dtype', 'auto')}, device {kw.get('device', 'auto')}"


def reference_problem(subject: str, subject_cfg: RoleConfig, reference: str, reference_cfg: RoleConfig,
                      default_base: str) -> str | None:
    """Why `reference` is not a fair reference for the trained `subject` (another base model, another backend or
    precision), naming both; None when it is fair. `default_base`: params.yaml training.base_model."""
    mine = training_base(subject_cfg.model, default_base)
    theirs = training_base(reference_cfg.model, default_base)
    problems = []
    if not any(same_model(a, b) for a in mine for b in theirs):
        problems.append(f"its model {reference_cfg.model!r} (base {theirs[0]!r}) is not {subject!r}'s training base "
                        f"{mine[0]!r}")
    if _serving(subject_cfg) != _serving(reference_cfg):
        problems.append(f"it is served by {_serving(reference_cfg)}, {subject!r} by {_serving(subject_cfg)}")
    if not problems:
        return None
    return (f"unfair comparison {subject!r} vs reference {reference!r}: {'; '.join(problems)}. The reference of a "
            "trained model is its training base served by the same backend in the same precision (params.yaml "
            "evaluation.trained_baseline / trained_pairs, llm.subjects)")
