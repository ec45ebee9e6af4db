"""GGUF -> Hugging Face conversion (llm/hf_models.py): gguf's parser and tensor-name map memoized while
transformers converts, for the same files as its own three-parse conversion."""

from __future__ import annotations

import contextlib

import gguf

from dagster_project.llm import hf_models
from dagster_project.llm.backends.llamacpp import resolve_gguf

MODEL = "smollm2-135m-instruct"


def test_the_memo_returns_one_parse_per_file_and_is_undone_afterwards():
    path = resolve_gguf(MODEL)
    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    with hf_models.gguf_parsed_once():
        assert gguf.GGUFReader(path) is gguf.GGUFReader(path)
        arch = gguf.MODEL_ARCH.LLAMA
        assert gguf.get_tensor_name_map(arch, 30) is gguf.get_tensor_name_map(arch, 30)
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader, name_map)


def test_a_conversion_parses_the_file_once_and_writes_what_transformers_alone_writes(tmp_path, monkeypatch):
    real = gguf.GGUFReader
    parses = []

    def counting(*args, **kwargs):
        parses.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(gguf, "GGUFReader", counting)
    fast = hf_models.convert_gguf(MODEL, tmp_path / "fast")
    assert len(parses) == 1

    parses.clear()
    monkeypatch.setattr(hf_models, "gguf_parsed_once", contextlib.nullcontext)  # transformers on its own
    plain = hf_models.convert_gguf(MODEL, tmp_path / "plain")
    assert len(parses) == 3  # tokenizer, config, weights: what the memo saves

    files = sorted(p.name for p in plain.iterdir())
    assert "model.safetensors" in files and sorted(p.name for p in fast.iterdir()) == files
    assert all((fast / f).read_bytes() == (plain / f).read_bytes() for f in files)
