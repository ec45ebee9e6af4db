"""`clarify metrics`: headline JSON per group and accuracy-by-turn tables, read from hand-written asset tables."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from typer.testing import CliRunner

from dagster_project.cli import app


def write_tables(assets: Path, accuracy: float = 0.5) -> None:
    """Small asset tables of every group the headline reads (columns as the real assets write them)."""
    def put(df: pl.DataFrame, *parts: str) -> None:
        path = assets.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        df.write_parquet(path)

    put(pl.DataFrame({"dataset": ["clarifymt"] * 3, "subject": ["smollm2"] * 3, "method": ["base", "base", "agent"],
                      "scope": ["all_turns", "turn_2", "all_turns"], "n": [8, 4, 8],
                      "accuracy": [accuracy, 0.1, 0.625], "macro_f1": [0.4, 0.2, float("nan")]}),
        "evaluation", "method_comparison.parquet")
    put(pl.DataFrame({"breakdown": ["overall", "by_turn", "by_turn", "by_turn", "by_turn"],
                      "dataset": ["clarifymt"] * 5, "subject": ["smollm2"] * 5,
                      "method": ["base", "base", "base", "agent", "agent"], "turn": [None, 2, 1, 1, 2],
                      "n": [8, 4, 4, 4, 4], "accuracy": [accuracy, 0.25, accuracy + 0.25, 0.5, 0.75]}),
        "evaluation", "metric_tables.parquet")
    put(pl.DataFrame({"breakdown": ["overall", "by_turns"], "ranker": ["bm25", "bm25"], "input": ["multi_turn"] * 2,
                      "modality": ["text_only"] * 2, "n_turns": [None, 2], "n_queries": [3, 3], "n_excluded": [0, 0],
                      "mrr": [0.5, 0.9], "p_at_1": [0.25, 0.9], "ndcg_at_3": [0.4, 0.9]}),
        "retrieval", "retrieval_metrics.parquet")
    put(pl.DataFrame({"subject": ["smollm2"], "ic_accuracy": [0.6], "sdrs": [0.3], "ars": [0.5]}),
        "intents", "intent_eval.parquet")
    put(pl.DataFrame({"subject": ["smollm2"], "system": ["clarify"], "label": ["x"], "f1_total": [0.45],
                      "f1_ambiguous": [0.3], "f1_unambiguous": [0.6], "avg_turns": [1.5]}),
        "double_turn", "answer_set_eval.parquet")
    put(pl.DataFrame({"candidate_id": ["a", "b"], "kept": [True, False]}), "logs", "log_candidates", "2024-05-01.parquet")
    put(pl.DataFrame({"candidate_id": ["c"], "kept": [True]}), "logs", "log_candidates", "2024-05-02.parquet")
    put(pl.DataFrame({"question_id": ["q1", "q2", "q3", "q4"], "status": ["ok", "ok", "ok", "parse_error"]}),
        "annotations", "cotap_annotations.parquet")


def _run(tmp_path: Path) -> tuple[str, Path]:
    res = CliRunner().invoke(app, ["metrics", "--assets", str(tmp_path / "assets"), "--out",
                                   str(tmp_path / "metrics"), "--plots", str(tmp_path / "plots")])
    assert res.exit_code == 0, res.output
    return res.output, tmp_path / "metrics"


def test_headline_json_per_group(tmp_path):
    write_tables(tmp_path / "assets")
    _, out = _run(tmp_path)
    assert sorted(p.name for p in out.iterdir()) == ["clarilm.json", "double_turn.json", "evaluation.json",
                                                     "intents.json", "retrieval.json"]
    def read(group: str) -> dict:
        return json.loads((out / f"{group}.json").read_text())[group]  # one top key: the group (column prefix)

    ev = read("evaluation")
    assert ev["clarifymt"]["smollm2"]["base"] == {"accuracy": 0.5, "macro_f1": 0.4, "n": 8}  # all_turns scope
    assert ev["clarifymt"]["smollm2"]["agent"]["macro_f1"] is None  # NaN is not JSON: null
    ret = read("retrieval")
    assert ret["bm25"]["multi_turn"]["text_only"] == {"n_queries": 3, "mrr": 0.5, "p_at_1": 0.25, "ndcg_at_3": 0.4}
    assert read("intents")["smollm2"] == {"ic_accuracy": 0.6, "sdrs": 0.3, "ars": 0.5}
    assert read("double_turn")["smollm2"]["clarify"]["f1_total"] == 0.45
    cl = read("clarilm")
    assert cl["logs"]["log_candidates"] == {"rows": 3, "pass_rate": round(2 / 3, 4)}  # both daily partitions
    assert cl["annotations"]["cotap_annotations"] == {"rows": 4, "pass_rate": 0.75}
    assert "questions" not in cl


def test_accuracy_by_turn_plot_tables(tmp_path):
    write_tables(tmp_path / "assets")
    _run(tmp_path)
    folder = tmp_path / "plots" / "accuracy_by_turn"
    assert sorted(p.name for p in folder.iterdir()) == ["clarifymt-smollm2-agent.csv", "clarifymt-smollm2-base.csv"]
    base = pl.read_csv(folder / "clarifymt-smollm2-base.csv")
    assert base.to_dicts() == [{"turn": 1, "accuracy": 0.75, "n": 4}, {"turn": 2, "accuracy": 0.25, "n": 4}]


def test_missing_groups_are_left_out_not_a_crash(tmp_path):
    assets = tmp_path / "assets"
    write_tables(assets)
    _run(tmp_path)
    for name in ("retrieval", "intents", "double_turn", "logs", "annotations"):
        for f in sorted((assets / name).rglob("*.parquet"), reverse=True):
            f.unlink()
    output, out = _run(tmp_path)
    assert [p.name for p in out.iterdir()] == ["evaluation.json"]  # stale files of absent groups are removed
    left_out = " ".join(output.split("left out (tables not built):")[1].split())
    # registry order (defs/registry.py), every group with a metrics file but evaluation
    assert left_out == "double_turn, intents, retrieval, clarilm, training, headlines"


def test_nothing_built_writes_no_file(tmp_path):
    output, out = _run(tmp_path)
    assert list(out.iterdir()) == [] and list((tmp_path / "plots" / "accuracy_by_turn").iterdir()) == []
    assert "headline metrics in" in output and "none" in output


def test_training_headline_and_loss_curves(tmp_path):
    assets = tmp_path / "assets" / "training"
    (assets / "clarilm_sft").mkdir(parents=True)
    pl.DataFrame({"model": ["clarilm_sft"], "status": ["trained"], "rows": [4], "steps": [2], "final_loss": [1.25],
                  "wall_s": [3.0], "tokens_per_s": [120.0]}).write_parquet(assets / "clarilm_sft.parquet")
    pl.DataFrame({"model": ["single_turn_dpo"], "status": ["skipped_no_data"], "rows": [0], "steps": [None],
                  "final_loss": [None], "wall_s": [None], "tokens_per_s": [None]}).write_parquet(
        assets / "single_turn_dpo.parquet")
    pl.DataFrame({"step": [2, 1], "epoch": [1.0, 0.5], "loss": [1.25, 2.5]}).write_parquet(
        assets / "clarilm_sft" / "loss_curve.parquet")
    _, out = _run(tmp_path)
    head = json.loads((out / "training.json").read_text())["training"]
    assert head == {"clarilm_sft": {"rows": 4, "steps": 2, "final_loss": 1.25, "wall_s": 3.0, "tokens_per_s": 120.0}}
    curve = pl.read_csv(tmp_path / "plots" / "loss_curve" / "clarilm_sft.csv")
    assert curve.to_dicts() == [{"step": 1, "loss": 2.5}, {"step": 2, "loss": 1.25}]
