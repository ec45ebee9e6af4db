"""benchmarks/gpu_check.py without a GPU: the same code paths (random-initialised model of a real shape's type, SFT
then DPO through train_lm with params.gpu.yaml's settings, serving through the client and the transformers backend)
on a tiny shape on CPU, and the numbers it prints are filled in."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import gpu_check  # noqa: E402


def test_card_peaks_and_mfu():
    assert gpu_check.card_peak("NVIDIA H100 PCIe") == 756e12  # the longest matching name wins over "H100"
    assert gpu_check.card_peak("NVIDIA H200") == 989e12 and gpu_check.card_peak("Intel Xeon") is None
    assert gpu_check.mfu(1_000_000_000, 10_000, 60e12) == pytest.approx(1.0)
    assert gpu_check.mfu(1_000_000_000, None, 60e12) is None


def test_tiny_run_on_cpu_trains_and_serves(capsys):
    rows = gpu_check.main(["--tiny", "--shapes", "qwen2.5-7b", "--no-vllm"])
    what = [r["what"] for r in rows]
    assert [w.split(" ")[0] for w in what] == ["SFT", "DPO", "serve", "serve", "serve"], rows
    assert all(r["tokens_per_s"] > 0 and r["peak_gib"] > 0 for r in rows), rows
    sft = rows[0]
    assert (sft["steady_tokens_per_s"] or 0) > 0 and "merge drift" in sft["note"], rows
    assert "max_length 128" in sft["what"] and "batch 2 x 1" in sft["what"], rows
    assert "batched / one per call" in rows[-1]["note"]
    out = capsys.readouterr().out
    assert "# GPU check on CPU (tiny shapes)" in out and out.count("| qwen2.5-7b |") == 5
