"""benchmarks/bench_peers.py without the peers: the skip line when `.venv-peers` is absent (through run.py, as
`make bench` runs it), and the ratios to paper_scale computed from given numbers. Nothing is installed or sent."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import bench_peers  # noqa: E402
import run  # noqa: E402


def test_absent_venv_is_a_skip_line_not_a_failure(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench_peers, "PEER_VENV", tmp_path / "no-venv")
    out = tmp_path / "latest.json"
    assert run.main(["--only", "peers", "--out", str(out)]) == 0
    payload = json.loads(out.read_text())
    assert payload["failed"] == {} and payload["peers"]["skipped"] == bench_peers.SKIP_LINE
    assert "peer venv absent: make peers-install" in capsys.readouterr().err


def test_ratios_to_the_pipeline_from_given_numbers():
    ours = {"llm_calls": 12_014, "overhead_ms_per_call": 2.3, "peak_rss_mb": 1260.0, "client_cpu_s": 36.042}
    peers = {"distilabel": {"version": "1.5.3", "prompts": 12_014, "answered": 12_014, "served": 12_014,
                            "wall_s": 42.049, "cpu_s": 30.0, "import_s": 3.0, "stub_cpu_s": 2.4, "peak_rss_mb": 730.0},
             "curator-openai": {"version": "0.1.31", "prompts": 12_014, "answered": 12_014, "served": 12_015,
                                "wall_s": 19.58282, "cpu_s": 15.0, "import_s": 2.0, "stub_cpu_s": 2.4,
                                "peak_rss_mb": 370.0}}
    rows = bench_peers.compare(ours, peers)
    assert [r[0] for r in rows] == ["distilabel", "curator-openai"]
    assert rows[0][1] == pytest.approx(2.3 / 3.5) and rows[1][1] == pytest.approx(2.3 / 1.63)
    assert "pipeline 1,260 MB vs 730 MB" in rows[0][2] and "2.30 ms vs 1.63 ms" in rows[1][2]
    assert "CPU 3.00 ms vs 2.50 ms" in rows[0][2]

    res = bench_peers.BenchResult("peers")
    bench_peers._report(res, 12_014, peers, ours)
    assert res.metrics["curator_openai_ms_per_request"] == pytest.approx(1.63)
    assert res.metrics["ratio_distilabel"] == pytest.approx(2.3 / 3.5, abs=1e-6)
    notes = {label: note for label, _, note in res.lines}
    assert "+1 beside the prompts" in notes["curator-openai: requests the stub served"]
    alone = bench_peers.BenchResult("peers")
    bench_peers._report(alone, 12_014, peers, None)  # paper_scale did not run: the peers' own numbers only
    assert not any(k.startswith("ratio_") for k in alone.metrics) and alone.metrics["distilabel_served"] == 12_014


def test_a_subset_of_peers_runs_only_those(tmp_path, monkeypatch):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").touch()  # the venv "exists"; run_peer is replaced, so it never runs
    ran: list[str] = []

    def fake_run(python, peer, url, requests):
        ran.append(peer)
        return {"version": "0", "prompts": requests, "answered": requests, "served": requests, "wall_s": 1.0,
                "cpu_s": 1.0, "import_s": 0.1, "stub_cpu_s": 0.1, "peak_rss_mb": 10.0}

    monkeypatch.setattr(bench_peers, "run_peer", fake_run)
    res = bench_peers.bench_peers(requests=50, venv=tmp_path, peers=("curator-openai",))
    assert ran == ["curator-openai"] and res.metrics["curator_openai_served"] == 50
    assert dict((label, note) for label, _, note in res.lines)["chat requests per peer"] == "--requests"
    assert not any(k.startswith("distilabel") for k in res.metrics)
