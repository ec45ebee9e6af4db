"""Hugging Face model folders made from the GGUF files the project ships: the base for training and for the
transformers / vLLM backends. Converted once (dequantized by transformers, no network), reused afterwards."""

from __future__ import annotations

import functools
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dagster_project.config.home import home_path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

MODELS_DIR = ".cache/models"  # below CLARIFY_HOME, beside the LLM cache: shared by DVC experiment workspaces


@contextmanager
def gguf_parsed_once() -> Iterator[None]:
    """While a conversion runs, gguf's file parser and tensor-name map are memoized: transformers parses the GGUF
    once for the tokenizer, once for the config and once for the weights (the 49k-token vocabulary each time), and
    builds the name map once per module (397 times for SmolLM2). Both depend only on their arguments."""
    import gguf

    saved = gguf.GGUFReader, gguf.get_tensor_name_map
    gguf.GGUFReader = functools.cache(saved[0])
    gguf.get_tensor_name_map = functools.cache(saved[1])
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = saved


def convert_gguf(model: str, out: Path, dtype: str = "float32") -> Path:
    """Dequantize `model` (a .gguf path or a known alias, see resolve_gguf) into the HF folder `out`, with its
    tokenizer and chat template. Written to a sibling and renamed, so a killed conversion leaves no half folder.
    float32 for CPU training and serving (bfloat16 is emulated on CPUs without avx512_bf16 / AMX, and its numbers
    differ); bfloat16 halves the size for GPUs."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    from dagster_project.llm.backends.llamacpp import resolve_gguf

    if (out / "config.json").exists():
        return out
    gguf = resolve_gguf(model)
    tmp = out.with_name(out.name + f".partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    t0 = time.monotonic()
    kw = {"gguf_file": gguf.name}
    with gguf_parsed_once():
        tok = AutoTokenizer.from_pretrained(gguf.parent, **kw)
        lm = AutoModelForCausalLM.from_pretrained(
            gguf.parent, dtype=getattr(torch, dtype), **kw,
            quantization_config=GgufConfig(gguf_file=gguf.name, dequantize=True))
    lm.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if not (tmp / "config.json").exists():
        raise RuntimeError(f"conversion of {gguf} wrote no config.json into {tmp}")
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        tmp.rename(out)
    except OSError:  # another process finished the same conversion first
        shutil.rmtree(tmp, ignore_errors=True)
        if not (out / "config.json").exists():
            raise
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"converted {gguf} -> {out} ({size / 1e6:.0f} MB, {time.monotonic() - t0:.0f} s)")
    return out


def hf_model_dir(model: str, dtype: str = "float32") -> Path:
    """An HF folder for `model`: a folder with config.json as is; a .gguf path or GGUF alias converted once
    into <CLARIFY_HOME>/.cache/models/<name>-hf[-<dtype>]."""
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise FileNotFoundError(f"{path} is not a Hugging Face model folder (no config.json)")
        return path
    name = path.stem if path.suffix == ".gguf" else model
    suffix = "" if dtype == "float32" else f"-{dtype}"
    return convert_gguf(model, home_path(MODELS_DIR) / f"{name}-hf{suffix}", dtype)
