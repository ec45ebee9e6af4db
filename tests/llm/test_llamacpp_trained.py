"""The llamacpp backend serving a trained model (llm/lora_gguf.py): its peft adapters, written as one llama.cpp adapter
file, change llama.cpp's logits as they change the transformers model's, on the real SmolLM2 (the GGUF and the HF
folder dequantized from it), stacked SFT + DPO adapters included."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from dagster_project.config import RoleConfig
from dagster_project.core.double_turn.sft_candidates import ClarifyCandidate, DirectCandidate
from dagster_project.llm.backends.base import Job
from dagster_project.llm.backends.llamacpp import LlamaCppBackend, trained_files
from dagster_project.llm.backends.transformers import load_model
from dagster_project.llm.client import LLMClient, single_resident
from dagster_project.llm.hf_models import hf_model_dir
from dagster_project.llm.identity import cache_identity
from dagster_project.llm.lora_gguf import permute_rows
from dagster_project.llm.lora_stack import lora_adapter
from dagster_project.llm.task import reply_schema
from dagster_project.llm.trained import served_model
from tests.llm.test_lora_stack import save_adapter

BASE = "smollm2-135m-instruct"
PROMPTS = ["Which flight should I book for the conference?", "The capital of France is a city called"]


@pytest.fixture(scope="module")
def base_dir() -> Path:
    return hf_model_dir(BASE).resolve()


def trained(root: Path, name: str, base_dir: Path, base_model: str = BASE, init_adapter: str | None = None) -> None:
    """A training folder as the training group writes it: training.json names the configured base (a GGUF alias)
    and the HF folder it resolved to."""
    meta = {"name": name, "base_model": str(base_dir), "init_adapter": init_adapter,
            "config": {"base_model": base_model}}
    (root / "assets/training" / name / "training.json").write_text(json.dumps(meta))


@pytest.fixture(scope="module")
def project(base_dir, tmp_path_factory) -> Path:
    """training/sft (q, v at rank 4) and training/dpo continuing it (k, o at rank 2, rsLoRA): q and k are the
    projections llama.cpp stores permuted, and the stack has two scaling rules."""
    root = tmp_path_factory.mktemp("trained")
    # small alphas: logit deltas of a few units, where the two runtimes' arithmetic differences stay small (at ~20
    # units both models saturate differently and the comparison measures that instead)
    save_adapter(base_dir, root / "assets/training/sft/adapter", seed=1, r=4, targets=["q_proj", "v_proj"], alpha=4)
    save_adapter(base_dir, root / "assets/training/dpo/adapter", seed=2, r=2, targets=["k_proj", "o_proj"],
                 rslora=True, alpha=2)
    trained(root, "sft", base_dir)
    trained(root, "dpo", base_dir, init_adapter="training/sft")
    return root


def llama_logits(gguf: Path, lora: Path | None, prompt_ids: list[list[int]]) -> np.ndarray:
    from llama_cpp import Llama

    llm = Llama(model_path=str(gguf), n_ctx=256, logits_all=True, verbose=False, n_threads=2,
                **({"lora_path": str(lora)} if lora else {}))
    rows = []
    for ids in prompt_ids:
        llm.reset()
        llm.eval(ids)
        rows.append(np.array(llm.scores[len(ids) - 1]))
    return np.stack(rows)


def test_the_adapter_moves_llama_cpp_as_it_moves_transformers(project, base_dir, monkeypatch):
    monkeypatch.chdir(project)
    gguf, lora = trained_files("training/dpo", None)  # the wheel's Q4_1 file, which the HF folder was dequantized from
    merged, tok = load_model(served_model("training/dpo"), "cpu", "float32")  # what the transformers backend serves
    from transformers import AutoModelForCausalLM

    plain = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    ids = [tok(p)["input_ids"] for p in PROMPTS]
    with torch.inference_mode():
        want = np.stack([merged(torch.tensor([i])).logits[0, -1].numpy() for i in ids])
        base = np.stack([plain(torch.tensor([i])).logits[0, -1].numpy() for i in ids])
    cpp_base, cpp = llama_logits(gguf, None, ids), llama_logits(gguf, lora, ids)
    hf_delta, cpp_delta = (want - base).ravel(), (cpp - cpp_base).ravel()
    assert np.abs(hf_delta).max() > 1.0  # the adapters change the model
    corr = np.corrcoef(hf_delta, cpp_delta)[0, 1]
    slope = np.polyfit(hf_delta, cpp_delta, 1)[0]
    # llama.cpp's quantized arithmetic differs from transformers' float32 (base logits differ up to ~0.6), so the
    # deltas agree closely but not exactly
    assert corr > 0.95 and 0.9 < slope < 1.15, (corr, slope)
    print(f"max delta {np.abs(hf_delta).max():.2f}, corr {corr:.4f}, slope {slope:.3f}")
    assert (want.argmax(1) == cpp.argmax(1)).all()

    # the same adapter without the q / k row permutation moves llama.cpp elsewhere: the permutation is needed
    import dagster_project.llm.lora_gguf as lora_gguf

    monkeypatch.setattr(lora_gguf, "_PERMUTED", {})
    stack = lora_adapter("training/dpo", served_model("training/dpo", merged=False).adapters)
    unpermuted = lora_gguf.write_lora_gguf(stack, gguf, project / "unpermuted.gguf")
    wrong = (llama_logits(gguf, unpermuted, ids) - cpp_base).ravel()
    assert np.corrcoef(hf_delta, wrong)[0, 1] < corr - 0.1


def test_permute_rows_matches_llama_cpp_converter():
    w = np.arange(2 * 8 * 3).reshape(16, 3)  # 2 heads of 8 rows: each head's halves interleaved row by row
    got = permute_rows(w, 2)
    assert got[:, 0].tolist() == [0, 12, 3, 15, 6, 18, 9, 21, 24, 36, 27, 39, 30, 42, 33, 45]


def test_backend_serves_the_trained_model_with_grammar_and_its_own_cache_identity(project, monkeypatch):
    monkeypatch.chdir(project)
    role = RoleConfig(backend="llamacpp", model="training/sft", n_threads=2, parallel=1)
    base_role = RoleConfig(backend="llamacpp", model=BASE, n_threads=2, parallel=1)
    greedy = {"temperature": 0.0, "top_p": 1.0, "max_tokens": 12, "seed": 0}
    schema = {"type": "object", "properties": {"action": {"enum": ["answer", "clarify"]}}, "required": ["action"]}
    # the double-turn DPO candidates' schemas fix the action: the model writes the reply kind it is asked for
    forced = [reply_schema(ClarifyCandidate), reply_schema(DirectCandidate)]
    jobs = [Job([{"role": "user", "content": PROMPTS[0]}], greedy, [0], None),
            Job([{"role": "user", "content": PROMPTS[0]}], {**greedy, "max_tokens": 48}, [0], schema),
            *(Job([{"role": "user", "content": PROMPTS[0]}], {**greedy, "max_tokens": 48}, [0], s) for s in forced)]
    mine, theirs = LlamaCppBackend(role).generate(jobs), LlamaCppBackend(base_role).generate(jobs)
    assert mine[0].texts != theirs[0].texts  # the adapter is applied
    assert json.loads(mine[1].texts[0])["action"] in ("answer", "clarify")  # the grammar holds the trained model too
    # (the text may be cut at max_tokens: the action comes first, as the schema orders it)
    starts = [o.texts[0][:20] for o in mine[2:]]
    assert starts == ['{"action":"clarify",', '{"action":"answer","'], [o.texts for o in mine]
    ident = cache_identity(role)
    assert ident["model_file"] != cache_identity(base_role)["model_file"]
    assert cache_identity(role.model_copy(update={"quantize": "q8_0"})) != ident


def test_a_model_trained_from_a_non_gguf_base_is_refused_by_name(project, base_dir, monkeypatch):
    monkeypatch.chdir(project)
    (project / "assets/training/hub").mkdir()
    (project / "assets/training/hub/adapter").symlink_to(project / "assets/training/sft/adapter")
    trained(project, "hub", base_dir, base_model="HuggingFaceTB/SmolLM2-135M-Instruct")
    with pytest.raises(ValueError, match=r"training/hub: trained from 'HuggingFaceTB/SmolLM2-135M-Instruct', not "
                                         r"from a GGUF.*backend transformers or vllm"):
        trained_files("training/hub", "q8_0")
    from dagster_project.runs.preflight import role_check

    found, problem = role_check(RoleConfig(backend="llamacpp", model="training/hub"), 1.0)
    assert found == "trained model: no GGUF base" and "not from a GGUF" in problem


def test_one_trained_llamacpp_model_stays_loaded_at_a_time():
    built: list[str] = []

    def factory(cfg):
        built.append(cfg.model)
        return object()

    roles = {m: RoleConfig(backend="llamacpp", model=m) for m in ("training/a", "training/b", BASE)}
    client = LLMClient.__new__(LLMClient)
    client._factories, client._backends = {"llamacpp": factory}, {}  # noqa: SLF001 - the backend table alone
    for m in ("training/a", BASE, "training/b"):
        client.backend(roles[m])
    loaded = {RoleConfig.model_validate_json(k).model for k in client._backends}  # noqa: SLF001
    assert loaded == {BASE, "training/b"} and built == ["training/a", BASE, "training/b"]
    assert single_resident(roles[BASE]) is None and single_resident(roles["training/a"]) == "llamacpp-trained"


def test_doctor_describes_a_trained_llamacpp_model(project, base_dir, monkeypatch):
    from dagster_project.runs.preflight import role_check

    monkeypatch.chdir(project)
    found, problem = role_check(RoleConfig(backend="llamacpp", model="training/dpo"), 1.0)
    assert found == "trained model: SmolLM2-135M-Instruct.Q4_1.gguf + 2 LoRA adapter(s)" and problem is None
    found, problem = role_check(RoleConfig(backend="llamacpp", model="training/unbuilt"), 1.0)
    assert found.startswith("not built yet") and problem is None  # the training group builds it
