"""The transformers serving path (trained models as subjects): tokens/s one request at a time vs one batch of 16.

SmolLM2-135M-Instruct as the HF folder the training group starts from (converted once from the shipped GGUF,
float32), greedy, 32 new tokens per reply, through TransformersBackend.generate exactly as the LLM client calls it.
A trained model serves at the same speed: its LoRA adapters are merged into the weights at load time.
"""

from __future__ import annotations

from _common import BenchResult, ratio, say, timer

PROMPTS = [
    "What is the capital of France?", "Recommend a book.", "How do I fix it?", "Tell me about Jaguar.",
    "What time is the game tonight?", "Plan a trip for me.", "Which laptop should I buy?", "Explain photosynthesis.",
    "How tall is the tower?", "Write a short poem about rain.", "Is it safe to eat?", "Convert 5 miles to km.",
    "Who won the match?", "Suggest a name for my dog.", "How do I cook rice?", "What does the error mean?",
]
MAX_TOKENS = 32


def _jobs():
    from dagster_project.llm.backends.base import Job

    return [Job(({"role": "user", "content": p},), {"temperature": 0.0, "top_p": 1.0, "max_tokens": MAX_TOKENS,
                                                   "seed": 0}, [0], None) for p in PROMPTS]


def bench_serving() -> BenchResult:
    from dagster_project.config import RoleConfig
    from dagster_project.llm.hf_models import hf_model_dir
    from dagster_project.llm.backends.transformers import TransformersBackend

    res = BenchResult("serving")
    folder = hf_model_dir("smollm2-135m-instruct")
    with timer() as t_load:
        backend = TransformersBackend(RoleConfig(backend="transformers", model=str(folder),
                                                 engine_kwargs={"batch_size": len(PROMPTS)}))
    res.add("load_s", t_load[0], "model load (HF folder, float32)", "s", f"device {backend.device}")
    jobs = _jobs()
    backend.generate(jobs[:1])  # warm-up
    say(f"serving: {len(jobs)} prompts one at a time")
    with timer() as t_one:
        single = [backend.generate([j])[0] for j in jobs]
    say(f"serving: {len(jobs)} prompts in one batch")
    with timer() as t_batch:
        batched = backend.generate(jobs)
    tok_one = sum(o.tokens_out for o in single)
    tok_batch = sum(o.tokens_out for o in batched)
    same = sum(a.texts == b.texts for a, b in zip(single, batched))
    res.add("one_at_a_time_tok_s", tok_one / t_one[0], "one request at a time", "tok/s",
            f"{tok_one} tokens in {t_one[0]:.1f} s")
    res.add("batched_tok_s", tok_batch / t_batch[0], f"one batch of {len(jobs)}", "tok/s",
            f"{tok_batch} tokens in {t_batch[0]:.1f} s")
    res.add("batched_vs_one_at_a_time", ratio(tok_batch / t_batch[0], tok_one / t_one[0]), "batched / one at a time",
            "x", f"{same}/{len(jobs)} replies identical (greedy; left padding may flip a near-tie)")
    return res
