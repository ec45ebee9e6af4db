"""A trained model's peft LoRA adapter as a llama.cpp adapter file, so the llamacpp backend serves `training/<name>`
on the GGUF its base was converted from, with its grammar and prompt-prefix reuse (the transformers backend has
neither, and decodes the 135M demo model several times slower on CPU).

llama.cpp adds scale * alpha / rank * B @ A to a weight, as peft does. The adapter's scaling is folded into B and
alpha is written as the rank, so llama.cpp's factor is exactly peft's. llama.cpp stores a LLaMA model's q / k
projections with their rows permuted for its rotary layout (transformers undoes it when it reads the GGUF), so the
output rows of those B matrices get the same permutation. A stacked model (DPO on SFT) is one adapter first
(lora_stack.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from dagster_project.llm.lora_stack import CONFIG, WEIGHTS, AdapterStackError, adapter_scaling, lora_modules

ARCHITECTURES = ("llama",)  # GGUF architectures whose tensor names and q / k layout this converter knows
_PERMUTED = {"attn_q": "head_count", "attn_k": "head_count_kv"}  # rows permuted per head by llama.cpp's converter


def _field(reader, key: str):  # noqa: ANN001, ANN202 - gguf.GGUFReader, a scalar field's value
    field = reader.fields.get(key)
    if field is None:
        return None
    return field.contents()


def base_layout(base_gguf: Path) -> dict[str, int | str]:
    """Architecture, block count and head counts of the GGUF an adapter will be applied to."""
    import gguf

    reader = gguf.GGUFReader(str(base_gguf))
    arch = str(_field(reader, "general.architecture"))
    if arch not in ARCHITECTURES:
        raise AdapterStackError(f"{base_gguf}: architecture {arch!r}; llama.cpp adapters are written here for "
                                f"{', '.join(ARCHITECTURES)} only (serve this model with backend transformers or vllm)")
    heads = int(_field(reader, f"{arch}.attention.head_count"))
    kv = _field(reader, f"{arch}.attention.head_count_kv")
    return {"arch": arch, "blocks": int(_field(reader, f"{arch}.block_count")), "head_count": heads,
            "head_count_kv": int(kv) if kv is not None else heads}


def permute_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's q / k row order: each head's two rotary halves interleaved (convert_hf_to_gguf's `permute`)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_tensors(adapter: Path, layout: dict[str, int | str]) -> dict[str, np.ndarray]:
    """{llama.cpp tensor name: float32 array} for a peft adapter folder: `<weight>.lora_a` as stored (rank x in),
    `<weight>.lora_b` times the adapter's scaling (out x rank), q / k rows permuted."""
    import gguf
    from safetensors.numpy import load_file

    cfg = json.loads((adapter / CONFIG).read_text())
    scale = adapter_scaling(cfg, adapter)
    names = gguf.get_tensor_name_map(getattr(gguf.MODEL_ARCH, str(layout["arch"]).upper()), int(layout["blocks"]))
    out: dict[str, np.ndarray] = {}
    for module, (a, b) in lora_modules(load_file(str(adapter / WEIGHTS)), adapter).items():
        hf = module.removeprefix("base_model.model.")
        name = names.get_name(hf)
        if name is None:
            raise AdapterStackError(f"{adapter / WEIGHTS}: module {module!r} has no llama.cpp tensor name")
        b = np.asarray(b, dtype=np.float32) * np.float32(scale)
        kind = name.rsplit(".", 1)[-1]
        if kind in _PERMUTED:
            b = permute_rows(b, int(layout[_PERMUTED[kind]]))
        out[f"{name}.weight.lora_a"] = np.ascontiguousarray(a, dtype=np.float32)
        out[f"{name}.weight.lora_b"] = np.ascontiguousarray(b)
    return out


def write_lora_gguf(adapter: Path, base_gguf: Path, out: Path) -> Path:
    """`out`, the llama.cpp adapter file of a peft adapter folder for `base_gguf` (written once: to a sibling, then
    renamed, so a killed conversion leaves no half file)."""
    import gguf

    if out.is_file():
        return out
    layout = base_layout(base_gguf)
    tensors = gguf_tensors(adapter, layout)
    ranks = {t.shape[0] for n, t in tensors.items() if n.endswith(".lora_a")}
    if len(ranks) != 1:
        raise AdapterStackError(f"{adapter}: modules of different ranks {sorted(ranks)}; one rank per adapter file")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.partial-{os.getpid()}")
    writer = gguf.GGUFWriter(str(tmp), str(layout["arch"]))
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(ranks.pop()))  # scaling already in B: llama.cpp's is 1
    for name, array in sorted(tensors.items()):
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(out)
    return out
