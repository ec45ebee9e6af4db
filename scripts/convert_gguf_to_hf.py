"""Convert a GGUF chat model (default: the embedded SmolLM2-135M-Instruct) into a Hugging Face folder for vLLM.

vLLM does not read GGUF on CPU, so the weights are dequantized once with transformers (needs `gguf` and
`accelerate`; both are in .venv-vllm) and saved with the tokenizer and its chat template:

    .venv-vllm/bin/python scripts/convert_gguf_to_hf.py smollm2-135m-instruct .cache/models/smollm2-135m-instruct-hf
    .venv-vllm/bin/python scripts/convert_gguf_to_hf.py /path/to/any-model.Q4_K_M.gguf /path/to/out

The first argument is anything `resolve_gguf` accepts (a known alias or a .gguf path). The output folder is
written to a temporary sibling and renamed, so a killed conversion never leaves a half folder behind.
No network: nothing is fetched from a model hub.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def convert(model: str, out: Path) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    from dagster_project.llm.backends.llamacpp import resolve_gguf

    gguf = resolve_gguf(model)
    if (out / "config.json").exists():
        print(f"{out} already converted")
        return out
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    t0 = time.monotonic()
    kw = {"gguf_file": gguf.name}
    tok = AutoTokenizer.from_pretrained(gguf.parent, **kw)
    lm = AutoModelForCausalLM.from_pretrained(
        gguf.parent, dtype=torch.bfloat16, **kw,
        quantization_config=GgufConfig(gguf_file=gguf.name, dequantize=True))
    lm.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if not (tmp / "config.json").exists():
        raise RuntimeError(f"conversion of {gguf} wrote no config.json into {tmp}")
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"converted {gguf} -> {out} ({size / 1e6:.0f} MB, {time.monotonic() - t0:.0f} s)")
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    convert(argv[0], Path(argv[1]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
