"""Convert a GGUF chat model (default: the embedded SmolLM2-135M-Instruct) into a Hugging Face folder, for vLLM,
the transformers backend and training (llm/hf_models.py; the training group calls it itself when needed).

vLLM does not read GGUF on CPU, so the weights are dequantized once with transformers (needs `gguf` and
`accelerate`, in .venv and .venv-vllm) and saved with the tokenizer and its chat template. The optional third
argument is the dtype (float32 default, for CPUs; bfloat16 for GPUs):

    .venv/bin/python scripts/convert_gguf_to_hf.py smollm2-135m-instruct .cache/models/smollm2-135m-instruct-hf
    .venv-vllm/bin/python scripts/convert_gguf_to_hf.py /path/to/any-model.Q4_K_M.gguf /path/to/out bfloat16

The first argument is anything `resolve_gguf` accepts (a known alias or a .gguf path). The output folder is
written to a temporary sibling and renamed, so a killed conversion never leaves a half folder behind.
No network: nothing is fetched from a model hub.
"""

from __future__ import annotations

import sys
from pathlib import Path

from dagster_project.llm.hf_models import convert_gguf


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__)
        return 2
    convert_gguf(argv[0], Path(argv[1]), *(argv[2:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
