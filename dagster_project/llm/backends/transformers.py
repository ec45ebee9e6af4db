"""Hugging Face transformers in-process: serves a local HF folder, a GGUF alias (converted once) or a trained model
(`training/<name>`: base + LoRA adapters merged, or its merged `model/`) with batched generation, on CPU or CUDA.

Each sample draws from its own torch.Generator seeded with (request seed + sample index), so a reply does not
depend on which other requests share its batch: the cache stays reproducible. JSON schemas are not enforced
(no constrained-decoding library is installed): the schema is appended to the last user message and the task
layer parses the reply, marking it parse_error when it is not valid JSON.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from typing import Any

from dagster_project.config import RoleConfig
from dagster_project.llm.backends.base import Job, JobOutput, short_error
from dagster_project.llm.trained import ServedModel, served_model

ENGINE_KEYS = {"device", "dtype", "batch_size"}
SCHEMA_INSTRUCTION = "Reply with only a JSON object that matches this JSON schema:\n{schema}"


def engine_options(kwargs: dict[str, object], cuda_available: bool) -> tuple[str, str, int]:
    """(device, dtype, batch_size) from a role's engine_kwargs: device auto picks cuda when present; dtype defaults
    to float32 on CPU (this CPU only emulates bfloat16) and bfloat16 on CUDA."""
    unknown = sorted(set(kwargs) - ENGINE_KEYS)
    if unknown:
        raise ValueError(f"engine_kwargs {unknown} are not settings of backend 'transformers' "
                         f"(known: {sorted(ENGINE_KEYS)})")
    device = str(kwargs.get("device", "auto"))
    if device == "auto":
        device = "cuda" if cuda_available else "cpu"
    dtype = str(kwargs.get("dtype", "bfloat16" if device.startswith("cuda") else "float32"))
    batch_size = int(kwargs.get("batch_size", 16))  # type: ignore[call-overload]
    if batch_size < 1:
        raise ValueError(f"engine_kwargs batch_size must be >= 1, got {batch_size}")
    return device, dtype, batch_size


def with_schema(messages: list[dict[str, str]], schema: dict | None) -> list[dict[str, str]]:
    """The messages with the schema instruction appended to the last user message (as a new one if none)."""
    if not schema:
        return messages
    note = SCHEMA_INSTRUCTION.format(schema=json.dumps(schema, separators=(",", ":")))
    out = [dict(m) for m in messages]
    for m in reversed(out):
        if m.get("role") == "user":
            m["content"] = f"{m['content']}\n\n{note}"
            return out
    return [*out, {"role": "user", "content": note}]


def load_model(served: ServedModel, device: str, dtype: str) -> tuple[Any, Any]:
    """(model, tokenizer): the weights, then each LoRA adapter merged in order (init_adapter before adapter)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dagster_project.lib.hf_models import hf_model_dir
    from dagster_project.llm.backends.llamacpp import KNOWN_GGUF

    spec = served.weights
    if spec in KNOWN_GGUF or spec.endswith(".gguf") or os.path.isdir(os.path.expanduser(spec)):
        spec = str(hf_model_dir(spec))  # a folder as is; a GGUF converted once (float32) below CLARIFY_HOME
    model = AutoModelForCausalLM.from_pretrained(spec, dtype=getattr(torch, dtype))
    for adapter in served.adapters:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    tok = AutoTokenizer.from_pretrained(served.tokenizer or spec)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return model.to(device).eval(), tok


def row_sampler(seeds: list[int], temperature: float, top_p: float, device: str) -> Any:
    """A logits processor that samples every row with its own generator and leaves only the drawn token, so greedy
    decoding then takes it: a row's draws depend on its seed alone, not on its batch."""
    import torch
    from transformers import LogitsProcessor

    class RowSampler(LogitsProcessor):
        def __init__(self) -> None:
            self.generators = [torch.Generator(device=device).manual_seed(s) for s in seeds]

        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
            probs = torch.softmax(scores.float() / temperature, dim=-1)
            if top_p < 1.0:
                sorted_p, order = probs.sort(dim=-1, descending=True)
                drop = sorted_p.cumsum(dim=-1) - sorted_p >= top_p  # keep the smallest set reaching top_p
                probs = probs.scatter(-1, order, sorted_p.masked_fill(drop, 0.0))
            picks = torch.stack([torch.multinomial(p, 1, generator=g) for p, g in zip(probs, self.generators)])
            return torch.full_like(scores, float("-inf")).scatter(-1, picks, 0.0)

    return RowSampler()


class TransformersBackend:
    """transformers generate() in batches of engine_kwargs.batch_size prompts (left padding, the tokenizer's chat
    template), n samples per request; greedy requests decode once and copy (samples would be identical)."""

    chunk_size = 16

    def __init__(self, cfg: RoleConfig):
        import torch

        device, dtype, self.batch_size = engine_options(cfg.engine_kwargs, torch.cuda.is_available())
        if cfg.n_threads:
            torch.set_num_threads(cfg.n_threads)
        self.device = device
        self.model, self.tok = load_model(served_model(cfg.model), device, dtype)
        eos = self.model.generation_config.eos_token_id
        self.eos = set(eos if isinstance(eos, list) else [eos if eos is not None else self.tok.eos_token_id])

    def generate(self, jobs: list[Job]) -> list[JobOutput]:
        outs = [JobOutput() for _ in jobs]
        groups: dict[tuple[float, float, int], list[tuple[int, int, list[int]]]] = defaultdict(list)
        for i, job in enumerate(jobs):
            try:
                text = self.tok.apply_chat_template(with_schema(list(job.messages), job.json_schema),
                                                    tokenize=False, add_generation_prompt=True)
                ids = self.tok(text, add_special_tokens=False)["input_ids"]
            except Exception as err:  # noqa: BLE001 - a bad request fails its own row, not the batch
                outs[i] = JobOutput(error=short_error(err))
                continue
            s = job.sampling
            greedy = s["temperature"] == 0
            key = (float(s["temperature"]), float(s["top_p"]), int(s["max_tokens"]))
            for idx in job.sample_indices[:1] if greedy else job.sample_indices:
                groups[key].append((i, s["seed"] + idx, ids))
        replies: dict[tuple[int, int], tuple[str, bool, int, int]] = {}
        for (temperature, top_p, max_tokens), rows in groups.items():
            rows.sort(key=lambda r: len(r[2]))  # similar lengths share a batch: less padding
            for start in range(0, len(rows), self.batch_size):
                batch = rows[start:start + self.batch_size]
                try:
                    done = self._batch([r[2] for r in batch], [r[1] for r in batch], temperature, top_p, max_tokens)
                except Exception as err:  # noqa: BLE001 - the batch's rows become llm_error rows
                    for i, _, _ in batch:
                        outs[i] = JobOutput(error=short_error(err))
                    continue
                for (i, seed, _), reply in zip(batch, done):
                    replies[(i, seed)] = reply
        for i, job in enumerate(jobs):
            if outs[i].error:
                continue
            greedy = job.sampling["temperature"] == 0
            for idx in job.sample_indices:
                seed = job.sampling["seed"] + (job.sample_indices[0] if greedy else idx)
                text, truncated, n_in, n_out = replies[(i, seed)]
                outs[i].texts.append(text)
                outs[i].truncated.append(truncated)
                outs[i].tokens_in += n_in
                outs[i].tokens_out += n_out
        return outs

    def _batch(self, prompts: list[list[int]], seeds: list[int], temperature: float, top_p: float,
               max_tokens: int) -> list[tuple[str, bool, int, int]]:
        """One generate() call: (text, truncated, tokens in, tokens out) per prompt."""
        import torch
        from transformers import GenerationConfig, LogitsProcessorList

        enc = self.tok.pad({"input_ids": prompts}, return_tensors="pt").to(self.device)
        config = GenerationConfig(max_new_tokens=max_tokens, do_sample=False, pad_token_id=self.tok.pad_token_id,
                                  eos_token_id=sorted(self.eos))
        processors = LogitsProcessorList([row_sampler(seeds, temperature, top_p, self.device)] if temperature else [])
        with torch.inference_mode():
            out = self.model.generate(**enc, generation_config=config, logits_processor=processors)
        new = out[:, enc["input_ids"].shape[1]:].tolist()
        results = []
        for prompt, tokens in zip(prompts, new):
            end = next((k for k, t in enumerate(tokens) if t in self.eos), None)
            kept = tokens if end is None else tokens[:end]
            results.append((self.tok.decode(kept, skip_special_tokens=True), end is None and len(tokens) >= max_tokens,
                            len(prompt), len(kept) + (end is not None)))
        return results
