"""GPU check: train and serve models of real shapes with the project's own code; prints tokens/s, MFU, peak memory.

Run by a developer on a GPU machine, never by CI (docs/gpu.md):
    python benchmarks/gpu_check.py                      # both shapes, params.gpu.yaml's training settings
    python benchmarks/gpu_check.py --shapes smollm2-1.7b --steps 20 --requests 256

Models are randomly initialised on the device from a table of shapes (nothing is downloaded); every shape uses the
SmolLM2 tokenizer (the HF folder converted from the shipped GGUF), so its vocabulary is 49,152. Training goes through
training.lm_training.train_lm (SFT, then DPO on the SFT adapter) with params.gpu.yaml's `training` section and capped
steps; serving goes through the LLM client and the transformers backend (the trained adapters merged at load), and
through vLLM on the base weights when vLLM is importable. Without CUDA the same code paths run on tiny shapes on CPU
(--tiny, chosen automatically), which tests/lib/test_gpu_check.py runs.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Published shapes (the models' config.json), without their vocabularies: the SmolLM2 tokenizer's is used.
SHAPES: dict[str, dict[str, Any]] = {
    "smollm2-1.7b": {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 24,
                     "num_attention_heads": 32, "num_key_value_heads": 32, "max_position_embeddings": 8192,
                     "rope_theta": 130000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": True},
    "qwen2.5-7b": {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
                   "num_attention_heads": 28, "num_key_value_heads": 4, "max_position_embeddings": 32768,
                   "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": False},
}
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "max_position_embeddings": 2048}
# Dense bf16 tensor-core peaks (TFLOP/s) from the vendors' data sheets, matched against torch's device name.
PEAK_TFLOPS = {"H200": 989.0, "H100 NVL": 835.0, "H100 PCIe": 756.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0,
               "L4": 121.0, "A10G": 70.0}
WORDS = ("order", "flight", "account", "refund", "jaguar", "mercury", "python", "bank", "apple", "delivery", "music",
         "password", "hotel", "battery", "camera", "weather", "invoice", "laptop", "train", "ticket", "garden")


def card_peak(name: str) -> float | None:
    """The card's dense bf16 peak in FLOP/s (longest matching table key), None for an unknown card or a CPU."""
    hits = [k for k in PEAK_TFLOPS if k in name]
    return PEAK_TFLOPS[max(hits, key=len)] * 1e12 if hits else None


def mfu(params: int, tokens_per_s: float | None, peak: float | None) -> float | None:
    """Model FLOP utilisation, 6 x params x tokens/s over the card's peak (the training convention)."""
    return 6 * params * tokens_per_s / peak if tokens_per_s and peak else None


def text_of(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def sft_rows(n: int, prompt_words: int, reply_words: int) -> list[dict[str, Any]]:
    rng = random.Random(0)
    return [{"prompt": [{"role": "system", "content": "Decide whether the request needs a clarifying question."},
                        {"role": "user", "content": text_of(rng, prompt_words)}],
             "completion": [{"role": "assistant", "content": text_of(rng, reply_words)}]} for _ in range(n)]


def dpo_rows(n: int, prompt_words: int, reply_words: int) -> list[dict[str, Any]]:
    rng = random.Random(1)
    return [{**r, "chosen": r.pop("completion"),
             "rejected": [{"role": "assistant", "content": text_of(rng, reply_words)}]}
            for r in sft_rows(n, prompt_words, reply_words)]


def peak_memory_gib(device: str) -> float:
    """Peak GPU memory allocated since the last reset; on CPU the process's peak RSS (VmHWM)."""
    import torch

    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**30
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def reset_memory(device: str) -> None:
    import torch

    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def build_model(shape: dict[str, Any], tokenizer: str, folder: Path, device: str, dtype: str) -> int:
    """A randomly initialised model of `shape` saved with the tokenizer into `folder`; returns its parameter count."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer)
    spec = dict(shape)
    config = AutoConfig.for_model(spec.pop("model_type"), vocab_size=len(tok), bos_token_id=tok.bos_token_id,
                                  eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, **spec)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    del model
    return params


def steady_tokens_per_s(curve_file: Path) -> float | None:
    """Tokens/s between the first and the last logged step (startup and the first step's compilation left out)."""
    import polars as pl

    curve = pl.read_parquet(curve_file)
    if "num_tokens" not in curve.columns or "elapsed_s" not in curve.columns or curve.height < 2:
        return None
    dt = curve["elapsed_s"][-1] - curve["elapsed_s"][0]
    return (curve["num_tokens"][-1] - curve["num_tokens"][0]) / dt if dt > 0 else None


def train(kind: str, rows: list[dict[str, Any]], cfg: Any, root: Path, device: str, init: Path | None) -> dict:
    """One train_lm run: its result row plus steady tokens/s, peak memory and the merge drift."""
    from dagster_project.training.lm_training import LMJob, train_lm

    reset_memory(device)
    name = f"check_{kind}"
    row = train_lm(LMJob(name, kind, rows, f"gpu_check/{kind}", init), cfg, root)  # type: ignore[arg-type]
    if row["status"] != "trained":
        raise RuntimeError(f"{kind}: {row['status']}: {row['reason']}")
    meta = json.loads((root / name / "training.json").read_text())
    return {**row, "steady_tokens_per_s": steady_tokens_per_s(root / name / "loss_curve.parquet"),
            "peak_gib": peak_memory_gib(device), "merge_drift": meta.get("merge_drift", {}).get("max_abs_logit_diff")}


def chat_requests(n: int, prompt_words: int, temperature: float, max_tokens: int, seed: int) -> list[Any]:
    from dagster_project.llm.chat import ChatRequest, Sampling

    rng = random.Random(seed)
    return [ChatRequest(messages=({"role": "user", "content": text_of(rng, prompt_words)},),
                        sampling=Sampling(temperature=temperature, max_tokens=max_tokens, seed=seed + i))
            for i in range(n)]


def serve(role: Any, backend: Any, work: Path, requests: list[Any], one_per_call: bool, device: str) -> dict:
    """Generated tokens/s of `requests` through an LLMClient over the loaded `backend` (a fresh cache, so nothing is a
    hit): one chat() with all of them, or one chat() per request."""
    from dagster_project.config import LLMConfig
    from dagster_project.llm.client import LLMClient

    cache = work / f"cache-{time.monotonic_ns()}.sqlite"
    client = LLMClient(LLMConfig(cache_path=str(cache), roles={"default": role}),
                       backends={role.backend: lambda cfg: backend})
    reset_memory(device)
    t0 = time.perf_counter()
    results = [r for req in requests for r in client.chat("default", [req])] if one_per_call \
        else client.chat("default", requests)
    wall = time.perf_counter() - t0
    errors = [r.error for r in results if r.error]
    if errors:
        raise RuntimeError(f"serving: {len(errors)} of {len(results)} requests failed, first: {errors[0]}")
    tokens = sum(r.tokens_out for r in results)
    return {"tokens_per_s": tokens / wall, "tokens": tokens, "wall_s": wall, "peak_gib": peak_memory_gib(device)}


def training_config(args: argparse.Namespace, base: Path, device: str, dtype: str) -> tuple:
    """(SFT config, DPO config): params.gpu.yaml's `training` section with ClariLM's own settings (per_model
    clarilm_sft / clarilm_dpo), on the random base, steps capped, one loss row per step; tiny batches on CPU; the
    command line's overrides (packing, checkpointing, batch) on top."""
    from dagster_project.config import TrainingConfig, read_params_file

    cfg = TrainingConfig.model_validate(dict((read_params_file(args.params) or {}).get("training", {})))
    small = {"batch_size": 2, "grad_accum": 1, "max_length": 128} if args.tiny else {}
    batch = {k: v for k, v in (("batch_size", args.batch), ("grad_accum", args.grad_accum)) if v}
    out = []
    for name, kind in (("clarilm_sft", "sft"), ("clarilm_dpo", "dpo")):
        own = cfg.for_model(name)
        pack = {"packing": True} if args.packing and kind == "sft" else {}
        stage = getattr(own, kind).model_copy(update={"max_steps": args.steps, **small, **batch, **pack})
        out.append(own.model_copy(update={
            "base_model": str(base), "device": device, "dtype": dtype, "merge": False, "logging_steps": 1,
            "per_model": {}, kind: stage, "gradient_checkpointing": own.gradient_checkpointing and not args.no_ckpt}))
    return tuple(out)


def check_shape(name: str, shape: dict[str, Any], args: argparse.Namespace, work: Path, device: str,
                peak: float | None) -> list[dict[str, Any]]:
    """Build, train (SFT, DPO) and serve one shape; one result row per measurement."""
    from dagster_project.config import RoleConfig
    from dagster_project.llm.backends.transformers import TransformersBackend

    dtype = "float32" if device == "cpu" else "bfloat16"
    base = work / f"base-{name}"
    params = build_model(shape, args.tokenizer, base, device, dtype)
    print(f"== {name}: {params / 1e9:.3f}B parameters, {device} {dtype}", flush=True)
    sft_cfg, dpo_cfg = training_config(args, base, device, dtype)
    root = work / "assets" / "training"
    need_sft = args.steps * sft_cfg.sft.batch_size * sft_cfg.sft.grad_accum
    need_dpo = args.steps * dpo_cfg.dpo.batch_size * dpo_cfg.dpo.grad_accum
    out = []
    sft = train("sft", sft_rows(need_sft, args.prompt_words, args.reply_words), sft_cfg, root, device, None)
    dpo = train("dpo", dpo_rows(need_dpo, args.prompt_words, args.reply_words), dpo_cfg, root, device,
                root / "check_sft" / "adapter")
    for kind, r, cfg, s in (("SFT", sft, sft_cfg, sft_cfg.sft), ("DPO", dpo, dpo_cfg, dpo_cfg.dpo)):
        pack = ", packing" if getattr(s, "packing", False) else ""
        out.append({"shape": name, "what": f"{kind} LoRA r{cfg.lora.r}, batch {s.batch_size} x {s.grad_accum}, "
                    f"max_length {s.max_length}, checkpointing {cfg.gradient_checkpointing}{pack}",
                    "tokens_per_s": r["tokens_per_s"], "steady_tokens_per_s": r["steady_tokens_per_s"],
                    "mfu": mfu(params, r["steady_tokens_per_s"] or r["tokens_per_s"], peak),
                    "peak_gib": r["peak_gib"], "note": f"{r['steps']} steps, merge drift {r['merge_drift']:.3g}"})
    n, seq = args.requests, args.sequential
    role = RoleConfig(backend="transformers", model="training/check_dpo", max_tokens=args.new_tokens,
                      engine_kwargs={"batch_size": n})
    cwd = Path.cwd()
    os.chdir(work)  # training/<name> resolves below ./assets/training
    try:
        backend = TransformersBackend(role)
        greedy = serve(role, backend, work, chat_requests(n, args.prompt_words, 0.0, args.new_tokens, 0), False,
                       device)
        sampled = serve(role, backend, work, chat_requests(n, args.prompt_words, 0.7, args.new_tokens, 1), False,
                        device)
        single = serve(role, backend, work, chat_requests(seq, args.prompt_words, 0.7, args.new_tokens, 2), True,
                       device)
        del backend
    finally:
        os.chdir(cwd)
    label = f"serve SFT+DPO merged at load, {n} requests, {args.new_tokens} new tokens"
    out.append({"shape": name, "what": f"{label}, greedy", "tokens_per_s": greedy["tokens_per_s"],
                "peak_gib": greedy["peak_gib"], "note": f"one call, batch {n}"})
    out.append({"shape": name, "what": f"{label}, T=0.7", "tokens_per_s": sampled["tokens_per_s"],
                "peak_gib": sampled["peak_gib"],
                "note": f"greedy / sampled {greedy['tokens_per_s'] / sampled['tokens_per_s']:.2f}x"})
    out.append({"shape": name, "what": f"serve one request per call ({seq}), T=0.7",
                "tokens_per_s": single["tokens_per_s"], "peak_gib": single["peak_gib"],
                "note": f"batched / one per call {sampled['tokens_per_s'] / single['tokens_per_s']:.1f}x"})
    if importlib.util.find_spec("vllm") is not None and not args.no_vllm:
        from dagster_project.llm.backends.vllm import VLLMBackend

        reset_memory(device)
        vrole = RoleConfig(backend="vllm", model="training/check_dpo", max_tokens=args.new_tokens,
                           engine_kwargs={"gpu_memory_utilization": 0.5, "max_model_len": 2048})
        os.chdir(work)  # the trained model, served as its base + the SFT+DPO stack as one LoRA adapter
        try:
            engine = VLLMBackend(vrole)
            try:
                v = serve(vrole, engine, work, chat_requests(n, args.prompt_words, 0.7, args.new_tokens, 3), False,
                          device)
            finally:
                engine.close()
        finally:
            os.chdir(cwd)
        out.append({"shape": name, "what": f"serve SFT+DPO as one LoRA adapter with vLLM, {n} requests, T=0.7",
                    "tokens_per_s": v["tokens_per_s"], "peak_gib": v["peak_gib"],
                    "note": f"vLLM / transformers {v['tokens_per_s'] / sampled['tokens_per_s']:.1f}x"})
    return out


def fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def print_table(device_name: str, peak: float | None, rows: list[dict[str, Any]]) -> None:
    peak_text = f"{peak / 1e12:.0f} TFLOP/s bf16 peak" if peak else "no peak known: MFU not computed"
    print(f"\n# GPU check on {device_name} ({peak_text})\n")
    print("| shape | what | tokens/s | steady tokens/s | MFU | peak memory GiB | note |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['shape']} | {r['what']} | {fmt(r['tokens_per_s'], ',.0f')} | "
              f"{fmt(r.get('steady_tokens_per_s'), ',.0f')} | {fmt(r.get('mfu'), '.1%')} | "
              f"{fmt(r['peak_gib'], '.1f')} | {r['note']} |")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    import torch

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=sorted(SHAPES, reverse=True))
    p.add_argument("--tiny", action="store_true", default=not torch.cuda.is_available(),
                   help="tiny shapes on CPU (the default without CUDA)")
    p.add_argument("--params", type=Path, default=ROOT / "params.gpu.yaml")
    p.add_argument("--tokenizer", default=None, help="an HF folder with the tokenizer (default: SmolLM2's)")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps per training run")
    p.add_argument("--requests", type=int, default=None, help="requests in the batched serving call")
    p.add_argument("--sequential", type=int, default=None, help="requests served one per call")
    p.add_argument("--new-tokens", type=int, default=None)
    p.add_argument("--prompt-words", type=int, default=None, help="words per prompt (~1.1 tokens each)")
    p.add_argument("--reply-words", type=int, default=None)
    p.add_argument("--packing", action="store_true", help="SFT with training.sft.packing (padding-free)")
    p.add_argument("--no-checkpointing", dest="no_ckpt", action="store_true", help="gradient checkpointing off")
    p.add_argument("--batch", type=int, default=None, help="micro-batch of both trainings (default: the preset's)")
    p.add_argument("--grad-accum", type=int, default=None)
    p.add_argument("--peak-tflops", type=float, default=None, help="the card's bf16 peak, if not in the table")
    p.add_argument("--no-vllm", action="store_true")
    p.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = p.parse_args(argv)
    sizes = {"steps": (2, 10), "requests": (8, 256), "sequential": (2, 16), "new_tokens": (8, 64),
             "prompt_words": (20, 220), "reply_words": (8, 40)}
    for key, (tiny, real) in sizes.items():
        if getattr(args, key) is None:
            setattr(args, key, tiny if args.tiny else real)
    if args.tokenizer is None:
        from dagster_project.llm.hf_models import hf_model_dir

        args.tokenizer = str(hf_model_dir("smollm2-135m-instruct"))
    return args


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    import torch

    args = parse_args(argv)
    device = "cpu" if args.tiny or not torch.cuda.is_available() else "cuda"
    device_name = torch.cuda.get_device_name() if device == "cuda" else "CPU (tiny shapes)"
    peak = args.peak_tflops * 1e12 if args.peak_tflops else (card_peak(device_name) if device == "cuda" else None)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="gpu_check-") as tmp:
        for name in args.shapes:
            shape = {**SHAPES[name], **TINY} if args.tiny else SHAPES[name]
            rows += check_shape(name, shape, args, Path(tmp), device, peak)
            gc.collect()
    print_table(device_name, peak, rows)
    if args.json:
        args.json.write_text(json.dumps({"device": device_name, "rows": rows}, indent=2) + "\n")
    return rows


if __name__ == "__main__":
    main()
