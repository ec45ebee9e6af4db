"""Relevance scores from a causal LM without generation: log P("yes") - log P("no") at the first reply token of
each chat prompt, batched (left padding) on CPU or CUDA. The generative yes/no re-ranker (core/retrieval/yes_no.py)
orders candidates by it, trained (training/reranker_generative) and untrained (its base) alike."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from dagster_project.llm.chat import Message
from dagster_project.llm.trained import ServedModel

YES, NO = "yes", "no"


def reply_token(tok: Any, prompt: list[Message], word: str) -> int:
    """The id of the first token the model emits when it replies `word` to `prompt` (the chat template decides the
    text around it, as in training); ValueError when the template's tokens around the reply do not line up."""
    head = tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
    full = tok.apply_chat_template([*prompt, {"role": "assistant", "content": word}], tokenize=False)
    a = tok(head, add_special_tokens=False)["input_ids"]
    b = tok(full, add_special_tokens=False)["input_ids"]
    if len(b) <= len(a) or b[:len(a)] != a:
        raise ValueError(f"tokenizer {tok.name_or_path!r}: the reply {word!r} does not start a new token after the "
                         "prompt's generation header; cannot score it at the first reply position")
    return int(b[len(a)])


def score_prompts(model: Any, tok: Any, prompts: Sequence[list[Message]], batch_size: int,
                  words: tuple[str, str] = (YES, NO)) -> list[float]:
    """log P(words[0]) - log P(words[1]) at the first reply position of each prompt: one forward pass per batch of
    `batch_size` prompts (sorted by length, left-padded, position ids from the attention mask), no generation."""
    import torch

    if not prompts:
        return []
    yes, no = (reply_token(tok, prompts[0], w) for w in words)
    texts = [tok.apply_chat_template(p, add_generation_prompt=True, tokenize=False) for p in prompts]
    lengths = [len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts]
    order = sorted(range(len(texts)), key=lambda i: lengths[i])
    out = [0.0] * len(texts)
    tok.padding_side = "left"
    device = next(model.parameters()).device
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        enc = tok([texts[i] for i in idx], return_tensors="pt", padding=True, add_special_tokens=False).to(device)
        positions = (enc["attention_mask"].cumsum(-1) - 1).clamp(min=0)
        with torch.inference_mode():
            logits = model(**enc, position_ids=positions).logits[:, -1, :].float()
        logp = torch.log_softmax(logits, dim=-1)
        for i, d in zip(idx, (logp[:, yes] - logp[:, no]).tolist(), strict=True):
            out[i] = float(d)
    return out


def yes_no_scorer(served: ServedModel, device: str, dtype: str,
                  batch_size: int) -> Callable[[Sequence[list[Message]]], list[float]]:
    """A scorer over `served` (a base model, or a trained folder's base + adapters merged), loaded once."""
    from dagster_project.llm.backends.transformers import load_model

    model, tok = load_model(served, device, dtype)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return lambda prompts: score_prompts(model, tok, prompts, batch_size)
