"""Model folders: swapped in whole, leftovers of a killed run removed, kept folders touched for pruning."""

import os

import pytest

from dagster_project.training.model_folder import building, folder_fingerprint, touch_tree


def test_building_swaps_in_whole_and_cleans_a_killed_runs_leftovers(tmp_path):
    final = tmp_path / "m"
    (tmp_path / ".m.partial-999").mkdir()  # a kill -9 mid-run left this
    (tmp_path / ".m.partial-999" / "adapter").mkdir()
    with building(final) as tmp:
        (tmp / "training.json").write_text("v1")
        assert not final.exists()  # nothing a subject could load until complete
    assert (final / "training.json").read_text() == "v1" and sorted(p.name for p in tmp_path.iterdir()) == ["m"]
    with pytest.raises(RuntimeError), building(final) as tmp:
        (tmp / "training.json").write_text("v2")
        raise RuntimeError("failed")
    assert (final / "training.json").read_text() == "v1" and sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_fingerprint_follows_config_and_weight_sizes(tmp_path):
    (tmp_path / "config.json").write_text('{"a": 1}')
    (tmp_path / "model.safetensors").write_bytes(b"x" * 10)
    fp = folder_fingerprint(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"y" * 10)
    assert folder_fingerprint(tmp_path) == fp  # same size: weights are not hashed (15 GB for 7B)
    (tmp_path / "model.safetensors").write_bytes(b"y" * 11)
    assert folder_fingerprint(tmp_path) != fp
    assert folder_fingerprint(tmp_path / "Qwen/Qwen2.5-7B-Instruct").startswith("hub:")


def test_touch_tree_marks_every_file_as_written_now(tmp_path):
    (tmp_path / "adapter").mkdir()
    f = tmp_path / "adapter" / "w.bin"
    f.write_bytes(b"1")
    os.utime(f, (1, 1))
    touch_tree(tmp_path)
    assert f.stat().st_mtime > 1e9
