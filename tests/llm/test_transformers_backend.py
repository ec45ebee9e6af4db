"""The transformers backend on the real SmolLM2 HF folder (a few tokens per call) and trained-model folders made here
with peft (random LoRA B, so an adapter changes the logits): batching, seeds, truncation, adapters, cache identity."""

import json
from pathlib import Path

import pytest
import torch

from dagster_project.config import RoleConfig
from dagster_project.llm.hf_models import hf_model_dir
from dagster_project.llm.backends.base import Job, JobOutput
from dagster_project.llm.backends.transformers import (
    TransformersBackend,
    engine_options,
    load_model,
    plain_kv,
    row_sampler,
    shared_prefixes,
    with_schema,
)
from dagster_project.llm.identity import cache_identity
from dagster_project.llm.trained import TrainedModelMissing, served_model

JOKE = ({"role": "user", "content": "Tell me a long joke about cats."},)
CAPITAL = ({"role": "user", "content": "What is the capital of France?"},)


@pytest.fixture(scope="module")
def base_dir() -> Path:
    return hf_model_dir("smollm2-135m-instruct").resolve()  # converted once (float32), reused afterwards


@pytest.fixture(scope="module")
def backend(base_dir: Path) -> TransformersBackend:
    return TransformersBackend(RoleConfig(backend="transformers", model=str(base_dir), engine_kwargs={"batch_size": 4}))


def save_adapter(base_dir: Path, folder: Path, seed: int) -> None:
    """A LoRA adapter with random A and B (init_lora_weights=False) plus the tokenizer, as the training group saves."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    peft = get_peft_model(model, LoraConfig(r=2, lora_alpha=64, target_modules=["q_proj", "v_proj"],
                                            init_lora_weights=False))
    peft.save_pretrained(folder)
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(folder)


def training_folder(root: Path, name: str, base_dir: Path, seed: int = 0, init_adapter: str | None = None) -> Path:
    folder = root / "assets" / "training" / name
    save_adapter(base_dir, folder / "adapter", seed)
    meta = {"name": name, "kind": "sft", "base_model": str(base_dir), "base_fingerprint": "f", "config": {},
            "data": {"asset": "annotations/sft_dataset", "rows": 1, "sha256": "x"}, "final_loss": 1.0, "steps": 1}
    if init_adapter:
        meta["init_adapter"] = init_adapter
    (folder / "training.json").write_text(json.dumps(meta))
    return folder


def sampled(messages, n: int, seed: int = 0, max_tokens: int = 4, temperature: float = 0.9) -> Job:
    return Job(messages, {"temperature": temperature, "top_p": 0.9, "max_tokens": max_tokens, "seed": seed},
               list(range(n)), None)


def test_batched_samples_are_seeded_per_sample_not_per_batch(backend: TransformersBackend):
    both = backend.generate([sampled(JOKE, 2), sampled(CAPITAL, 2)])
    alone = backend.generate([sampled(JOKE, 2)])[0]
    assert [len(o.texts) for o in both] == [2, 2] and not any(o.error for o in both)
    assert alone.texts == both[0].texts  # the same draws whether or not another request shared the batch
    assert both[0].truncated == [True, True]  # a long joke does not fit in 4 tokens
    assert 0 < both[0].tokens_out <= 8 and both[0].tokens_in > 10
    other_seed = backend.generate([sampled(JOKE, 2, seed=7)])[0]
    assert other_seed.texts != alone.texts or other_seed.texts[0] != other_seed.texts[1]


def test_greedy_decodes_once_and_copies(backend: TransformersBackend):
    out = backend.generate([sampled(CAPITAL, 2, temperature=0.0, max_tokens=3)])[0]
    assert len(out.texts) == 2 and out.texts[0] == out.texts[1] and out.texts[0]


def test_row_sampler_draws_depend_on_the_seed_only():
    scores = torch.log_softmax(torch.randn(3, 50, generator=torch.Generator().manual_seed(1)), dim=-1)
    scores[2] = scores[0]
    a = row_sampler([5, 6, 5], 1.0, 0.8, "cpu")(None, scores)
    b = row_sampler([5], 1.0, 0.8, "cpu")(None, scores[:1])
    picks = a.argmax(-1)
    assert picks[0] == picks[2] == b.argmax(-1)[0]  # same seed, same scores: same token, wherever the row sits
    assert torch.isinf(a).sum() == 3 * 49  # only the drawn token is left


def test_engine_options_and_schema_prompt():
    assert engine_options({}, cuda_available=False) == ("cpu", "float32", 16)
    assert engine_options({}, cuda_available=True) == ("cuda", "bfloat16", 16)
    assert engine_options({"device": "cpu", "batch_size": 2}, cuda_available=True) == ("cpu", "float32", 2)
    with pytest.raises(ValueError, match="max_model_len"):
        engine_options({"max_model_len": 8}, cuda_available=False)
    msgs = with_schema([{"role": "system", "content": "s"}, {"role": "user", "content": "q"}], {"type": "object"})
    assert msgs[0]["content"] == "s" and msgs[1]["content"].startswith("q\n\nReply with only a JSON object")


def test_adapter_changes_logits_and_init_adapter_is_merged_first(base_dir, backend, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    training_folder(tmp_path, "sft", base_dir, seed=1)
    training_folder(tmp_path, "dpo", base_dir, seed=2, init_adapter="training/sft")
    served = served_model("training/dpo")
    assert [a.parent.name for a in served.adapters] == ["sft", "dpo"] and served.weights == str(base_dir)
    ids = backend.tok("Hello there", return_tensors="pt")
    logits = {}
    for name in ("sft", "dpo"):
        model, _ = load_model(served_model(f"training/{name}"), "cpu", "float32")
        with torch.inference_mode():
            logits[name] = model(**ids).logits
    with torch.inference_mode():
        base = backend.model(**ids).logits
    assert not torch.allclose(base, logits["sft"], atol=1e-3)
    assert not torch.allclose(logits["sft"], logits["dpo"], atol=1e-3)


def test_merged_model_folder_is_preferred(base_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "assets" / "training" / "m"
    (folder / "model").mkdir(parents=True)
    (folder / "model" / "config.json").write_text("{}")
    (folder / "training.json").write_text(json.dumps({"base_model": str(base_dir)}))
    served = served_model("training/m")
    assert served.weights == str(Path("assets/training/m/model")) and served.adapters == ()


def test_identity_follows_the_adapter(base_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = RoleConfig(backend="transformers", model="training/sft")
    assert cache_identity(cfg)["model_file"] == "missing"
    folder = training_folder(tmp_path, "sft", base_dir, seed=1)
    first = cache_identity(cfg)
    save_adapter(base_dir, folder / "adapter", seed=3)  # retrained: new weights in the same place
    second = cache_identity(cfg)
    assert first["model_file"] != second["model_file"] != "missing"
    plain = cache_identity(RoleConfig(backend="transformers", model=str(base_dir)))["model_file"]
    assert plain not in (first["model_file"], second["model_file"])


def test_missing_training_folder_names_subject_key_and_command(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TrainedModelMissing) as err:
        served_model("training/clarilm_sft", subject="clarilm_sft")
    msg = str(err.value)
    assert "llm.subjects.clarilm_sft.model" in msg and "clarify materialize training" in msg
    assert "assets/training/clarilm_sft/training.json" in msg
    (tmp_path / "assets" / "training" / "x").mkdir(parents=True)
    (tmp_path / "assets" / "training" / "x" / "training.json").write_text("{}")
    with pytest.raises(TrainedModelMissing, match="adapter_config.json"):
        served_model("training/x", subject="x")
    with pytest.raises(ValueError, match="training/<name>"):
        served_model("training/a/b")


def test_client_keeps_one_transformers_model_resident(tmp_path):
    from dagster_project.config import LLMConfig
    from dagster_project.llm.client import LLMClient

    made = []

    def factory(cfg):
        made.append(cfg.model)
        return object()

    client = LLMClient(LLMConfig(cache_path=str(tmp_path / "c.sqlite")),
                       backends={"transformers": factory, "llamacpp": factory})
    for backend, model in [("transformers", "a"), ("transformers", "b"), ("transformers", "a"),
                           ("llamacpp", "x.gguf"), ("llamacpp", "y.gguf"), ("llamacpp", "x.gguf")]:
        client.backend(RoleConfig(backend=backend, model=model))
    assert made == ["a", "b", "a", "x.gguf", "y.gguf"]  # a was dropped when b loaded; llama.cpp models stay


def greedy(content: str, max_tokens: int = 3) -> Job:
    return Job(({"role": "user", "content": content},), {"temperature": 0.0, "top_p": 1.0, "max_tokens": max_tokens,
                                                          "seed": 0}, [0], None)


def test_sampler_frequencies_follow_the_distribution_and_top_p():
    """Inverse CDF from hashed uniforms: 4,000 rows (one seed each) in one call draw tokens at their probabilities, and
    top-p removes the tail (probabilities 0.5/0.3/0.2, top_p 0.6 keeps the first two, renormalised)."""
    probs = torch.tensor([0.5, 0.3, 0.2])
    scores = probs.log().expand(4000, 3).clone()
    picks = row_sampler(list(range(4000)), 1.0, 1.0, "cpu")(None, scores).argmax(-1)
    freq = torch.bincount(picks, minlength=3).float() / 4000
    assert torch.allclose(freq, probs, atol=0.03), freq
    top = row_sampler(list(range(4000)), 1.0, 0.6, "cpu")(None, scores).argmax(-1)
    freq = torch.bincount(top, minlength=3).float() / 4000
    assert freq[2] == 0 and abs(freq[0] - 0.625) < 0.03, freq
    sampler = row_sampler([3, 3], 1.0, 1.0, "cpu")
    flat = torch.zeros(2, 1000)
    first, second = sampler(None, flat).argmax(-1), sampler(None, flat).argmax(-1)
    assert first[0] == first[1] and first[0] != second[0]  # the same seed repeats a draw only at the same step


def test_results_keep_request_order_while_rows_are_sorted_by_length(backend: TransformersBackend):
    prompts = ["Tell me a very long and detailed story about a cat who lived in Paris and loved cheese.", "Hi",
               "What is the capital of France?", "Why?", "Explain, step by step, how a bicycle gear works."]
    jobs = [greedy(p) for p in prompts]
    batched = backend.generate(jobs)
    alone = [backend.generate([j])[0] for j in jobs]
    assert [o.tokens_in for o in batched] == [o.tokens_in for o in alone]
    assert len({o.tokens_in for o in batched}) == len(prompts)  # distinct lengths: the order is really checked
    assert [o.texts for o in batched] == [o.texts for o in alone]


class OutOfMemoryAbove:
    """A model wrapper whose generate() raises CUDA out-of-memory for batches above `limit` rows."""

    def __init__(self, model, limit: int):
        self.model, self.limit, self.sizes = model, limit, []
        self.generation_config = model.generation_config

    def generate(self, input_ids, **kwargs):
        self.sizes.append(len(input_ids))
        if len(input_ids) > self.limit:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return self.model.generate(input_ids=input_ids, **kwargs)


def test_out_of_memory_halves_the_batch_and_retries(backend: TransformersBackend, monkeypatch):
    jobs = [greedy(p) for p in ("One?", "Two two?", "Three three three?", "Four four four four?", "Five.", "Six!")]
    expected = backend.generate(jobs)
    fake = OutOfMemoryAbove(backend.model, limit=2)
    monkeypatch.setattr(backend, "model", fake)
    monkeypatch.setattr(backend, "fit_size", backend.batch_size)
    outs = backend.generate(jobs)
    assert not any(o.error for o in outs)
    assert [o.texts for o in outs] == [o.texts for o in expected]
    assert fake.sizes == [4, 2, 2, 2] and backend.fit_size == 2  # the halved size is kept for later calls
    fake.sizes.clear()
    backend.generate(jobs[:3])
    assert fake.sizes == [2, 1]


def test_out_of_memory_at_one_row_fails_only_that_call_rows(backend: TransformersBackend, monkeypatch):
    monkeypatch.setattr(backend, "model", OutOfMemoryAbove(backend.model, limit=0))
    monkeypatch.setattr(backend, "fit_size", backend.batch_size)
    outs = backend.generate([greedy("One?"), greedy("Two?"), greedy("Three?")])
    assert all(o.error and o.error.startswith("OutOfMemoryError") for o in outs)
    assert backend.fit_size == 1


def test_client_sends_chunks_of_the_backend_batch_size(backend: TransformersBackend, tmp_path, monkeypatch):
    """The client sends batch_size requests per generate() call (it used to be a fixed 16, whatever the batch)."""
    from dagster_project.config import LLMConfig
    from dagster_project.llm.chat import ChatRequest, Sampling
    from dagster_project.llm.client import LLMClient

    assert backend.chunk_size == backend.batch_size == 4
    sizes = []

    def generate(jobs: list[Job]) -> list[JobOutput]:
        sizes.append(len(jobs))
        return [JobOutput(texts=["x"] * len(j.sample_indices)) for j in jobs]

    monkeypatch.setattr(backend, "generate", generate)
    role = RoleConfig(backend="transformers", model="m", engine_kwargs={"batch_size": 4})
    client = LLMClient(LLMConfig(cache_path=str(tmp_path / "c.sqlite"), roles={"default": role}),
                       backends={"transformers": lambda cfg: backend})
    requests = [ChatRequest(({"role": "user", "content": f"q{i}"},), Sampling(max_tokens=2)) for i in range(10)]
    results = client.chat("default", requests)
    assert sizes == [4, 4, 2] and all(r.texts == ["x"] for r in results)


def test_greedy_and_sampled_requests_share_one_pass_with_the_replies_they_get_alone(backend: TransformersBackend,
                                                                                    monkeypatch):
    """Rows of one max_tokens decode together whatever their temperature (one generate() instead of one per
    temperature), and each reply is the one the request gets on its own."""
    jobs = [greedy("What is the capital of France?", max_tokens=4), sampled(JOKE, 2, seed=3, max_tokens=4),
            sampled(CAPITAL, 1, seed=5, max_tokens=4, temperature=0.5)]
    alone = [backend.generate([j])[0] for j in jobs]
    calls = []
    real = backend.model.generate
    monkeypatch.setattr(backend.model, "generate", lambda **kw: calls.append(len(kw["input_ids"])) or real(**kw))
    mixed = backend.generate(jobs)
    assert calls == [4]  # 1 greedy row + 2 + 1 sampled rows, one batch
    assert [o.texts for o in mixed] == [o.texts for o in alone]
    assert [o.tokens_out for o in mixed] == [o.tokens_out for o in alone]


def test_row_sampler_leaves_greedy_rows_and_draws_each_sampled_row_as_alone():
    scores = torch.log_softmax(torch.randn(3, 50, generator=torch.Generator().manual_seed(2)), dim=-1)
    mixed = row_sampler([1, 2, 3], [0.0, 1.0, 0.7], [1.0, 0.8, 1.0], "cpu")(None, scores)
    assert torch.equal(mixed[0], scores[0])  # temperature 0: greedy decoding takes its argmax
    assert torch.equal(mixed[1], row_sampler([2], 1.0, 0.8, "cpu")(None, scores[1:2])[0])
    assert torch.equal(mixed[2], row_sampler([3], 0.7, 1.0, "cpu")(None, scores[2:3])[0])


def test_a_named_dtype_enters_the_cache_key_and_the_default_keeps_the_old_key(base_dir):
    plain = RoleConfig(backend="transformers", model=str(base_dir))
    bf16 = RoleConfig(backend="transformers", model=str(base_dir), engine_kwargs={"dtype": "bfloat16"})
    assert "dtype" not in cache_identity(plain)  # caches written before keep serving the default precision
    assert cache_identity(bf16) == {**cache_identity(plain), "dtype": "bfloat16"}


def test_shared_prefixes_group_the_rows_that_save_the_most_prompt_tokens():
    catalogue = list(range(100, 300))  # 200 tokens most rows share (an intent catalogue, a system prompt)
    prompts = [catalogue + [1, 2], list(range(100, 190)) + [7, 7, 7], catalogue + [3], catalogue + [4, 5, 6],
               [9] * 150]
    groups = shared_prefixes(prompts)
    assert groups is not None
    assert sorted((sorted(rows), p) for rows, p in groups) == [([0, 2, 3], 200), ([1], 92), ([4], 149)]
    # the row sharing only 90 tokens is not merged in (that would cut the three rows' prefix to 90)
    assert all(p < len(prompts[r]) for rows, p in groups for r in rows)  # every row keeps a token of its own
    samples = shared_prefixes([catalogue] * 3)  # the samples of one request: one prefix, one token each left
    assert samples == [([0, 1, 2], 199)]
    assert shared_prefixes([list(range(50)) + [i] for i in range(4)]) is None  # under 64 shared tokens
    assert shared_prefixes([catalogue + [1], catalogue + [2], *[[5 + i] * 900 for i in range(4)]]) is None  # < 1/3


def test_rows_sharing_a_long_prefix_get_the_replies_they_get_alone(backend: TransformersBackend, monkeypatch):
    """A long shared system prompt is computed once and copied to its rows (mid-padded, positions from the mask):
    greedy replies are those each request gets alone, whatever its own suffix's length."""
    system = {"role": "system", "content": "You help customers of an online bookshop. " + " ".join(
        f"Rule {i}: answer politely, mention the order number when there is one, and never invent prices."
        for i in range(8))}
    questions = ["Where is my order?", "Can I return a book I bought last week, and how long does the refund take?",
                 "Hi"]
    jobs = [Job((system, {"role": "user", "content": q}), {"temperature": 0.0, "top_p": 1.0, "max_tokens": 5,
                                                            "seed": 0}, [0], None) for q in questions]
    jobs.append(greedy("What is the capital of France?", max_tokens=5))  # shares nothing: a group of its own
    alone = [backend.generate([j])[0] for j in jobs]
    groups = []
    real = backend._with_prefixes
    monkeypatch.setattr(backend, "_with_prefixes",
                        lambda prompts, g: groups.append(sorted((len(rows), p) for rows, p in g)) or real(prompts, g))
    shared = backend.generate(jobs)
    assert len(groups) == 1 and [n for n, _ in groups[0]] == [1, 3] and groups[0][1][1] > 150  # one batch of 4
    assert [o.texts for o in shared] == [o.texts for o in alone] and all(o.texts[0] for o in shared)
    assert [(o.tokens_in, o.tokens_out) for o in shared] == [(o.tokens_in, o.tokens_out) for o in alone]


def test_only_a_plain_per_layer_cache_is_shared_and_other_models_prefill_as_usual(backend: TransformersBackend,
                                                                                   monkeypatch):
    from transformers import DynamicCache, LlamaConfig, MistralConfig

    assert plain_kv(DynamicCache(config=LlamaConfig(num_hidden_layers=2)))
    assert not plain_kv(DynamicCache(config=MistralConfig(sliding_window=16, num_hidden_layers=2)))
    system = {"role": "system", "content": "Answer in one word. " * 40}
    jobs = [Job((system, {"role": "user", "content": q}), {"temperature": 0.0, "top_p": 1.0, "max_tokens": 3,
                                                            "seed": 0}, [0], None) for q in ("Red?", "Blue sky?")]
    alone = [backend.generate([j])[0] for j in jobs]
    pads = []
    real_pad = backend.tok.pad
    monkeypatch.setattr(backend.tok, "pad", lambda *a, **kw: pads.append(1) or real_pad(*a, **kw))
    assert [o.texts for o in backend.generate(jobs)] == [o.texts for o in alone] and pads == []  # prefix shared
    monkeypatch.setattr("dagster_project.llm.backends.transformers.plain_kv", lambda cache: False)
    assert [o.texts for o in backend.generate(jobs)] == [o.texts for o in alone] and pads == [1]  # usual prefill
