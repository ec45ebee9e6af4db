"""Hugging Face transformers in-process: serves a local HF folder, a GGUF alias (converted once) or a trained model
(`training/<name>`: base + LoRA adapters merged, or its merged `model/`) with batched generation, on CPU or CUDA.

Sampling is batched on the device: each row draws its token by inverse CDF from one uniform, a counter-based hash
of (request seed + sample index, step), so a row's draws do not depend on which other requests share its batch
and no Python loop runs per row. A prompt prefix several rows share is computed once (as in the llama.cpp
backend's prefix reuse, that can change a sampled reply's last bits). A batch that runs out of CUDA memory is
halved and retried. JSON schemas are not enforced (no constrained-decoding library is installed): the schema is
appended to the last user message and the task layer parses the reply, marking it parse_error when it is not valid
JSON.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, NamedTuple

from dagster_project.config import RoleConfig
from dagster_project.llm.backends.base import Job, JobOutput, short_error
from dagster_project.llm.trained import ServedModel, served_model

log = logging.getLogger(__name__)

ENGINE_KEYS = {"device", "dtype", "batch_size"}
SCHEMA_INSTRUCTION = "Reply with only a JSON object that matches this JSON schema:\n{schema}"


def engine_options(kwargs: dict[str, object], cuda_available: bool) -> tuple[str, str, int]:
    """(device, dtype, batch_size) from a role's engine_kwargs: device auto picks cuda when present; dtype defaults
    to float32 on CPU (the numbers training used, the same on every CPU; `bfloat16` is faster only on CPUs with it
    native, avx512_bf16 / amx_bf16, and gives other replies) and bfloat16 on CUDA."""
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

    from dagster_project.llm.hf_models import hf_model_dir
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


_MIX1, _MIX2, _GOLDEN = (int(c, 16) - (1 << 64) for c in ("bf58476d1ce4e5b9", "94d049bb133111eb", "9e3779b97f4a7c15"))


def _mix64(x: Any) -> Any:
    """splitmix64's finaliser on an int64 tensor (wrapping arithmetic; shifts made logical by masking)."""
    def shr(v: Any, k: int) -> Any:
        return (v >> k) & ((1 << (64 - k)) - 1)

    x = (x ^ shr(x, 30)) * _MIX1
    x = (x ^ shr(x, 27)) * _MIX2
    return x ^ shr(x, 31)


def row_uniforms(seeds: Any, step: int) -> Any:
    """One float64 uniform in (0, 1) per row, a pure function of (row seed, step): counter-based, so a row's draws
    never depend on its neighbours in the batch and no generator object exists per row."""
    offset = ((step + 1) * _GOLDEN + (1 << 63)) % (1 << 64) - (1 << 63)  # the product wrapped to int64
    bits = _mix64(_mix64(seeds) + offset)
    return (((bits >> 11) & ((1 << 53) - 1)).double() + 0.5) * 2.0 ** -53


def row_sampler(seeds: list[int], temperature: float | Sequence[float], top_p: float | Sequence[float],
                device: str) -> Any:
    """A logits processor that samples every row at once (inverse CDF over the temperature-scaled, top-p-truncated
    distribution, one uniform per row) and leaves only the drawn token, so greedy decoding then takes it.

    `temperature` and `top_p` are one value or one per row: rows at temperature 0 keep their logits (greedy), so
    greedy and sampled requests share a batch and its decoding steps; each row's draw is the same as alone."""
    import torch
    from transformers import LogitsProcessor

    n = len(seeds)
    temps = [float(temperature)] * n if isinstance(temperature, int | float) else [float(t) for t in temperature]
    tops = [float(top_p)] * n if isinstance(top_p, int | float) else [float(p) for p in top_p]
    subsets: dict[tuple[float, float], list[int]] = defaultdict(list)
    for row, (t, p) in enumerate(zip(temps, tops, strict=True)):
        if t > 0:
            subsets[(t, p)].append(row)

    def draw(scores: torch.Tensor, seeds: torch.Tensor, step: int, t: float, p: float) -> torch.Tensor:
        probs = torch.softmax(scores.float() / t, dim=-1)
        order = None
        if p < 1.0:
            probs, order = probs.sort(dim=-1, descending=True)
            probs = probs.masked_fill(probs.cumsum(dim=-1) - probs >= p, 0.0)  # keep the smallest set reaching top_p
        cdf = probs.double().cumsum(dim=-1)
        u = row_uniforms(seeds, step)[:, None] * cdf[:, -1:]
        picks = torch.searchsorted(cdf, u).clamp(max=scores.shape[-1] - 1)  # first token whose cdf reaches u
        if order is not None:
            picks = order.gather(-1, picks)
        return torch.full_like(scores, float("-inf")).scatter(-1, picks, 0.0)

    class RowSampler(LogitsProcessor):
        def __init__(self) -> None:
            # per (temperature, top_p): its rows and their seeds, made once for every decoding step
            self.subsets = [(t, p, torch.tensor(rows, dtype=torch.int64, device=device),
                             torch.tensor([seeds[r] for r in rows], dtype=torch.int64, device=device))
                            for (t, p), rows in subsets.items()]
            self.step = 0

        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
            out = scores
            for t, p, rows, row_seeds in self.subsets:
                drawn = draw(scores.index_select(0, rows), row_seeds, self.step, t, p)
                out = drawn if len(rows) == len(scores) else out.index_copy(0, rows, drawn)
            self.step += 1
            return out

    return RowSampler()


class Row(NamedTuple):
    """One decoded sequence: a job's sample (its seed) with the prompt's token ids and its sampling settings."""
    job: int
    seed: int
    ids: list[int]
    temperature: float
    top_p: float


MIN_SHARED_PREFIX = 64  # tokens: rows sharing fewer are prefilled together as usual


def shared_prefixes(prompts: list[list[int]], min_shared: int = MIN_SHARED_PREFIX
                    ) -> list[tuple[list[int], int]] | None:
    """Groups of rows (indices into `prompts`) with the prefix length each group computes once, every row keeping
    at least one token of its own; None when that saves under a third of the batch's prompt tokens (then one batched
    prefill is as cheap). Sorted prompts put shared prefixes side by side; the grouping cuts that order where
    neighbours share fewer than t tokens, for the t that saves the most tokens ((rows - 1) x prefix per group)."""
    order = sorted(range(len(prompts)), key=lambda i: prompts[i])
    lcps = [len(os.path.commonprefix([prompts[a], prompts[b]])) for a, b in zip(order, order[1:])]
    best: list[tuple[list[int], int]] = []
    best_saved = 0
    for t in sorted({n for n in lcps if n >= min_shared}):
        groups: list[tuple[list[int], int]] = [([order[0]], len(prompts[order[0]]))]
        for row, n in zip(order[1:], lcps):
            if n >= t:
                rows, shared = groups[-1]
                groups[-1] = ([*rows, row], min(shared, n))
            else:
                groups.append(([row], len(prompts[row])))
        saved = sum((len(rows) - 1) * shared for rows, shared in groups)
        if saved > best_saved:
            best, best_saved = groups, saved
    if 3 * best_saved < sum(len(p) for p in prompts):
        return None
    return [(rows, min(shared, *(len(prompts[r]) - 1 for r in rows))) for rows, shared in best]


def plain_kv(cache: Any) -> bool:
    """True when every layer of a transformers cache is a full-attention DynamicLayer, the one kind whose keys and
    values `_with_prefixes` copies into a batch's cache."""
    from transformers.cache_utils import DynamicLayer

    return all(type(layer) is DynamicLayer for layer in cache.layers)


def is_out_of_memory(err: BaseException) -> bool:
    import torch

    return isinstance(err, torch.cuda.OutOfMemoryError)


class TransformersBackend:
    """transformers generate() in batches of engine_kwargs.batch_size prompts (left padding, the tokenizer's chat
    template), n samples per request; greedy requests decode once and copy (samples would be identical).

    The client sends batch_size requests per call (chunk_size); within a call the rows (requests x samples) of one
    max_tokens are sorted by prompt length, so rows of similar length share a batch, greedy and sampled rows alike
    (one pass of decoding steps instead of one per temperature: each step reads every weight, on CPU its cost).
    Rows that share a long prompt prefix (a catalogue, a system prompt) have it computed once (`shared_prefixes`). A
    batch that runs out of CUDA memory is split in half and retried, down to single rows; the smaller size is kept
    for later calls."""

    def __init__(self, cfg: RoleConfig):
        import torch

        device, dtype, self.batch_size = engine_options(cfg.engine_kwargs, torch.cuda.is_available())
        self.chunk_size = self.batch_size
        self.fit_size = self.batch_size  # the largest batch known to fit in memory (halved on CUDA out-of-memory)
        if cfg.n_threads:
            torch.set_num_threads(cfg.n_threads)
        self.device = device
        self.model, self.tok = load_model(served_model(cfg.model), device, dtype)
        # the KV cache's argument and output name: `cache` from transformers 5.24, `past_key_values` before
        self.cache_arg = "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"
        eos = self.model.generation_config.eos_token_id
        self.eos = set(eos if isinstance(eos, list) else [eos if eos is not None else self.tok.eos_token_id])

    def generate(self, jobs: list[Job]) -> list[JobOutput]:
        outs = [JobOutput() for _ in jobs]
        groups: dict[int, list[Row]] = defaultdict(list)  # by max_tokens: greedy and sampled rows share batches
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
            for idx in job.sample_indices[:1] if greedy else job.sample_indices:
                groups[int(s["max_tokens"])].append(Row(i, s["seed"] + idx, ids, float(s["temperature"]),
                                                        float(s["top_p"])))
        replies: dict[tuple[int, int], tuple[str, bool, int, int]] = {}
        for max_tokens, rows in groups.items():
            rows.sort(key=lambda r: len(r.ids))  # similar lengths share a batch: less padding
            for batch, done in self._run_rows(rows, max_tokens):
                for row, reply in zip(batch, done):
                    if isinstance(reply, str):
                        outs[row.job] = JobOutput(error=reply)
                    else:
                        replies[(row.job, row.seed)] = reply
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

    def _run_rows(self, rows: list[Row], max_tokens: int) -> Any:
        """Yield (batch rows, one reply or error string per row), batches of at most fit_size rows; on CUDA
        out-of-memory the batch is halved and retried (one row that still does not fit becomes an error row)."""
        start = 0
        while start < len(rows):
            batch = rows[start:start + self.fit_size]
            try:
                done: list[Any] = self._batch(batch, max_tokens)
            except Exception as err:  # noqa: BLE001 - the batch's rows become llm_error rows
                if is_out_of_memory(err) and len(batch) > 1:
                    self._free_memory()
                    self.fit_size = len(batch) // 2
                    log.warning("transformers: CUDA out of memory at batch %d, retrying at batch %d",
                                len(batch), self.fit_size)
                    continue
                if is_out_of_memory(err):
                    self._free_memory()
                done = [short_error(err)] * len(batch)
            yield batch, done
            start += len(batch)

    def _free_memory(self) -> None:
        import gc

        import torch

        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def _batch(self, rows: list[Row], max_tokens: int) -> list[tuple[str, bool, int, int]]:
        """One generate() call: (text, truncated, tokens in, tokens out) per row."""
        import torch
        from transformers import GenerationConfig, LogitsProcessorList

        prompts = [r.ids for r in rows]
        groups = shared_prefixes(prompts) if len(rows) > 1 else None
        enc = (self._with_prefixes(prompts, groups) if groups else None) or \
            self.tok.pad({"input_ids": prompts}, return_tensors="pt").to(self.device)
        config = GenerationConfig(max_new_tokens=max_tokens, do_sample=False, pad_token_id=self.tok.pad_token_id,
                                  eos_token_id=sorted(self.eos))
        processors = LogitsProcessorList([row_sampler([r.seed for r in rows], [r.temperature for r in rows],
                                                      [r.top_p for r in rows], self.device)]
                                         if any(r.temperature for r in rows) else [])
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

    def _with_prefixes(self, prompts: list[list[int]], groups: list[tuple[list[int], int]]
                       ) -> dict[str, Any] | None:
        """generate() inputs whose first P columns are already in a KV cache: each group's prefix computed once
        (batch of one) and copied to its rows, right-aligned at P; the rest of each prompt right-aligned after it.
        Padding on both sides is masked, and positions follow the mask, so a row sees the positions it has alone.
        None for a model whose cache is not plain keys and values per layer (sliding window, hybrid)."""
        import torch
        from transformers import DynamicCache

        name = self.cache_arg
        width = max(p for _, p in groups)
        rest = max(len(prompts[r]) - p for rows, p in groups for r in rows)
        ids = torch.full((len(prompts), width + rest), self.tok.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        keys: list[Any] = []
        values: list[Any] = []
        with torch.inference_mode():
            for rows, p in groups:
                if not p:  # a one-token prompt alone: all of it after the cached columns
                    continue
                cache = getattr(self.model(input_ids=torch.tensor([prompts[rows[0]][:p]], device=self.device),
                                           use_cache=True), name)
                if not plain_kv(cache):
                    return None
                if not keys:
                    for layer in cache.layers:  # (rows, heads, width, head dim), zeros where masked
                        keys.append(layer.keys.new_zeros((len(prompts), layer.keys.shape[1], width,
                                                          layer.keys.shape[-1])))
                        values.append(layer.values.new_zeros((len(prompts), layer.values.shape[1], width,
                                                              layer.values.shape[-1])))
                at = torch.tensor(rows, device=self.device)
                for k, v, layer in zip(keys, values, cache.layers, strict=True):
                    k[at, :, width - p:] = layer.keys
                    v[at, :, width - p:] = layer.values
                for r in rows:
                    own = len(prompts[r]) - p
                    ids[r, width - p:width] = torch.tensor(prompts[r][:p])
                    ids[r, width + rest - own:] = torch.tensor(prompts[r][p:])
                    mask[r, width - p:width] = 1
                    mask[r, width + rest - own:] = 1
        batch_cache = DynamicCache()
        for i, (k, v) in enumerate(zip(keys, values, strict=True)):
            batch_cache.update(k, v, i)
        return {"input_ids": ids.to(self.device), "attention_mask": mask.to(self.device), name: batch_cache}
