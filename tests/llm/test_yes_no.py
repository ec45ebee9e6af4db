"""Yes/no relevance scores on a tiny random Llama with SmolLM2's tokenizer and chat template: the batched score is
log P(yes) - log P(no) at the first reply token (checked against a teacher-forced pass over the prompt + "yes"), the
same whatever the batch (left padding), and the scorer loads a served model (base + LoRA adapter merged)."""

import pytest

from dagster_project.core.retrieval.yes_no import relevance_prompt
from dagster_project.llm.trained import ServedModel
from dagster_project.llm.yes_no import reply_token, score_prompts, yes_no_scorer

CONV = "User: Tell me about teddy bears.\nSystem: Do you want to buy one?\nUser: yes, a really big one"
DOCS = ["Our shop sells giant teddy bears from three to seven feet tall.",
        "The history of the teddy bear starts with a hunting trip in 1902.",
        "Wash plush toys by hand in cold water."]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A randomly initialised 2-layer Llama saved with the SmolLM2 tokenizer (the project's base model's)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from dagster_project.llm.hf_models import hf_model_dir

    tok = AutoTokenizer.from_pretrained(hf_model_dir("smollm2-135m-instruct"))
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    folder = tmp_path_factory.mktemp("tiny")
    LlamaForCausalLM(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _prompts():
    return [relevance_prompt("buy a giant teddy bear", CONV if i % 2 else "", d, 400) for i, d in enumerate(DOCS)]


def test_score_is_the_log_odds_of_yes_at_the_first_reply_token_whatever_the_batch(tiny):
    import torch

    from dagster_project.llm.backends.transformers import load_model

    model, tok = load_model(ServedModel(weights=str(tiny)), "cpu", "float32")
    prompts = _prompts()  # different lengths: left padding in a batch
    batched = score_prompts(model, tok, prompts, batch_size=3)
    alone = [score_prompts(model, tok, [p], batch_size=1)[0] for p in prompts]
    assert batched == pytest.approx(alone, abs=1e-4)
    assert len(set(alone)) == 3  # the candidates are told apart
    yes, no = reply_token(tok, prompts[0], "yes"), reply_token(tok, prompts[0], "no")
    assert tok.decode([yes]) == "yes" and tok.decode([no]) == "no"
    for p, s in zip(prompts, alone, strict=True):  # teacher-forced: the prompt + "yes" in one pass
        head = tok(tok.apply_chat_template(p, add_generation_prompt=True, tokenize=False),
                   add_special_tokens=False)["input_ids"]
        ids = tok(tok.apply_chat_template([*p, {"role": "assistant", "content": "yes"}], tokenize=False),
                  return_tensors="pt", add_special_tokens=False)["input_ids"]
        assert ids[0, len(head)].item() == yes
        with torch.no_grad():
            logp = torch.log_softmax(model(ids).logits[0, len(head) - 1].float(), dim=-1)
        assert s == pytest.approx((logp[yes] - logp[no]).item(), abs=1e-4)
    assert score_prompts(model, tok, [], batch_size=2) == []


def test_the_scorer_serves_base_plus_adapter(tiny, tmp_path):
    """An adapter that changes the weights changes the scores; the base alone gives the plain model's."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32)
    peft = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    peft.save_pretrained(tmp_path / "adapter")
    prompts = _prompts()
    base = yes_no_scorer(ServedModel(weights=str(tiny)), "cpu", "float32", 2)(prompts)
    tuned = yes_no_scorer(ServedModel(weights=str(tiny), adapters=(tmp_path / "adapter",)), "cpu", "float32", 2)(prompts)
    assert base != pytest.approx(tuned, abs=1e-6)
    assert base == pytest.approx(yes_no_scorer(ServedModel(weights=str(tiny)), "cpu", "float32", 3)(prompts), abs=1e-4)
