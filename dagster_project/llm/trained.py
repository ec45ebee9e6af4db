"""Trained models as LLM subjects: `training/<name>` names the folder the training group wrote, assets/training/<name>/.

The folder holds `training.json` (base_model, optional init_adapter), `adapter/` (a peft LoRA adapter with the
tokenizer) and, sometimes, `model/` (merged weights, preferred when present). Pure path logic, no torch: the cache
identity (llm/identity.py) reads it too, before any backend loads a model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

TRAINING_PREFIX = "training/"
TRAINING_ROOT = Path("assets/training")  # relative to the working directory (the repo root), like every asset
BUILD_COMMAND = "clarify materialize training"


class TrainedModelMissing(FileNotFoundError):
    """A `training/<name>` model whose folder is missing or incomplete."""


@dataclass(frozen=True)
class ServedModel:
    """What to load: `weights` (a merged folder, a base HF folder, a GGUF alias or a hub id), then each adapter
    merged into it in order (init_adapter before adapter: DPO after SFT); tokenizer files from `tokenizer`."""

    weights: str
    adapters: tuple[Path, ...] = ()
    tokenizer: str | None = None
    base_fingerprint: str | None = None  # training.json's, for a base that is not a local file (a hub id)


def training_name(model: str) -> str | None:
    """`clarilm_dpo` for `training/clarilm_dpo`; None for any other model spec."""
    if not model.startswith(TRAINING_PREFIX):
        return None
    name = model[len(TRAINING_PREFIX):]
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"model {model!r}: expected training/<name> with one plain name")
    return name


def training_dir(model: str) -> Path:
    return TRAINING_ROOT / str(training_name(model))


def missing_message(model: str, subject: str | None, problem: str) -> str:
    """The error for a trained model that cannot be served: which subject, which params key, how to build it."""
    who = f"subject {subject!r} (params.yaml llm.subjects.{subject}.model: {model})" if subject else f"model {model!r}"
    return f"{who}: {problem}; build it with `{BUILD_COMMAND}`"


def served_model(model: str, subject: str | None = None, merged: bool = True) -> ServedModel:
    """The weights and adapters behind a model spec; raises TrainedModelMissing for an unbuilt training folder.
    `merged=False`: the base and adapters even when merged weights exist (llama.cpp applies the adapter itself)."""
    if training_name(model) is None:
        return ServedModel(weights=model)
    folder = training_dir(model)
    meta_file = folder / "training.json"
    if not meta_file.is_file():
        raise TrainedModelMissing(missing_message(model, subject, f"{meta_file} does not exist"))
    try:
        meta = json.loads(meta_file.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise TrainedModelMissing(missing_message(model, subject, f"{meta_file} is not readable JSON ({err})")) from None
    if merged and (folder / "model" / "config.json").is_file():
        return ServedModel(weights=str(folder / "model"), tokenizer=str(folder / "model"))
    adapter = folder / "adapter"
    if not (adapter / "adapter_config.json").is_file():
        raise TrainedModelMissing(missing_message(model, subject, f"{adapter} holds no adapter_config.json"))
    if not meta.get("base_model"):
        raise TrainedModelMissing(missing_message(model, subject, f"{meta_file} has no base_model"))
    adapters = (adapter,)
    if meta.get("init_adapter"):
        init = _adapter_path(str(meta["init_adapter"]), folder)
        if not (init / "adapter_config.json").is_file():
            raise TrainedModelMissing(missing_message(
                model, subject, f"init_adapter {meta['init_adapter']!r} of {meta_file} holds no adapter_config.json"))
        adapters = (init, adapter)
    return ServedModel(weights=str(meta["base_model"]), adapters=adapters, tokenizer=str(adapter),
                       base_fingerprint=meta.get("base_fingerprint"))


TEMPLATE_FIELD = "template"


def training_meta(model: str) -> dict | None:
    """A trained model's training.json as a mapping, or None when the folder is not built or the file unreadable."""
    try:
        meta = json.loads((training_dir(model) / "training.json").read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def configured_base(meta: dict | None) -> str | None:
    """training.base_model as a training.json (`training_meta`) records it (a GGUF alias, .gguf, HF folder or hub
    id); None when the folder is not built or records none."""
    return str(((meta or {}).get("config") or {}).get("base_model") or "") or None


def same_model(a: str, b: str) -> bool:
    """Equal specs, or two paths of one existing folder."""
    if a == b:
        return True
    pa, pb = Path(a).expanduser(), Path(b).expanduser()
    return pa.exists() and pb.exists() and pa.resolve() == pb.resolve()


def recorded_template(model: str, subject: str | None = None) -> dict:
    """training.json's `template` entry (how the model was prompted and how its replies are read; see
    core/training/template.py); a folder trained before templates were recorded is refused: retrain it."""
    served_model(model, subject)  # the folder is complete and its training.json readable
    meta_file = training_dir(model) / "training.json"
    record = json.loads(meta_file.read_text()).get(TEMPLATE_FIELD)
    if not isinstance(record, dict):
        raise TrainedModelMissing(missing_message(
            model, subject, f"{meta_file} has no `{TEMPLATE_FIELD}` field (the prompt template and reply parser the "
                            "model was trained with; folders trained before it was recorded must be retrained)"))
    return record


def _adapter_path(spec: str, folder: Path) -> Path:
    """init_adapter as written by the training group: `training/<name>` (that model's adapter/), a path as is,
    or a path relative to the model's own folder."""
    if spec.startswith(TRAINING_PREFIX):
        return training_dir(spec) / "adapter"
    path = Path(spec).expanduser()
    return path if path.is_absolute() or path.exists() else folder / path
