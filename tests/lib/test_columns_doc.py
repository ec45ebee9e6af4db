"""Every stored column has a catalog description (dagster_project/lib/columns.yaml), and columns.yaml names only real
assets. The groups run in-process with the scripted LLMs and fake embedders of tests/defs."""

from pathlib import Path

import polars as pl
import pytest
from defs import (
    test_assets,
    test_clarilm,
    test_double_turn,
    test_intents,
    test_retrieval,
)

from dagster_project.config.training import MODEL_NAMES
from dagster_project.definitions import defs as definitions
from dagster_project.defs.annotations import assets as annotations
from dagster_project.defs.facets import assets as facets
from dagster_project.defs.logs import assets as logs
from dagster_project.defs.questions import assets as questions
from dagster_project.lib.catalog import column_docs, describe


def undocumented_columns(assets_dir: Path) -> dict[str, list[str]]:
    """'<group>/<asset>' -> its stored columns without a description, for every Parquet file under ``assets_dir``:
    assets/<group>/<asset>.parquet, daily partitions assets/<group>/<asset>/<day>.parquet, and hive partitions
    assets/<group>/<asset>/<dim>=<value>/.../data.parquet, whose folder names are columns too. Files inside a trained
    model's folder (one holding training.json, e.g. assets/training/<model>/loss_curve.parquet) are not tables."""
    missing: dict[str, set[str]] = {}
    for path in sorted(Path(assets_dir).rglob("*.parquet")):
        parts = path.relative_to(assets_dir).parts
        if any((Path(assets_dir).joinpath(*parts[:i]) / "training.json").exists() for i in range(2, len(parts))):
            continue  # a file inside a trained model's folder (its loss curve), not a stored table
        group, asset = parts[0], (parts[1] if len(parts) > 2 else path.stem)
        hive = [p.split("=", 1)[0] for p in parts[2:-1] if "=" in p]
        key = f"{group}/{asset}"
        lacking = {c for c in [*pl.read_parquet_schema(path), *hive] if not describe(key, c)}
        if lacking:
            missing.setdefault(key, set()).update(lacking)
    return {k: sorted(v) for k, v in sorted(missing.items())}


def _assert_documented(assets_dir: Path, groups: set[str]) -> None:
    stored = {p.relative_to(assets_dir).parts[0] for p in assets_dir.rglob("*.parquet")}
    assert groups <= stored, f"expected Parquet files of {sorted(groups)} under {assets_dir}, found {sorted(stored)}"
    missing = undocumented_columns(assets_dir)
    assert not missing, f"describe these columns in dagster_project/defs/<group>/columns.yaml (or lib/columns.yaml common): {missing}"


def test_undocumented_columns_reads_files_daily_and_hive_partitions(tmp_path):
    one = pl.DataFrame({"subtype": ["lexical"], "zz_no_doc": [1]})
    (tmp_path / "benchmark").mkdir()
    one.write_parquet(tmp_path / "benchmark/taxonomy.parquet")
    day = tmp_path / "logs/raw_logs"
    day.mkdir(parents=True)
    pl.DataFrame({"role": ["user"], "zz_day": [1]}).write_parquet(day / "2024-05-01.parquet")
    for subject in ("s1", "s2"):  # two partitions of one asset: reported once
        hive = tmp_path / f"evaluation/predictions/method=base/subject={subject}/zz_dim=x"
        hive.mkdir(parents=True)
        pl.DataFrame({"response": ["ok"], "zz_pred": [0.5]}).write_parquet(hive / "data.parquet")
    (tmp_path / "evaluation/report").mkdir()
    (tmp_path / "evaluation/report/report.md").write_text("not Parquet: ignored")

    assert undocumented_columns(tmp_path) == {
        "benchmark/taxonomy": ["zz_no_doc"], "evaluation/predictions": ["zz_dim", "zz_pred"],
        "logs/raw_logs": ["zz_day"]}
    assert describe("evaluation/predictions", "method") and describe("evaluation/predictions", "subject")
    (tmp_path / "benchmark/taxonomy.parquet").unlink()
    assert "benchmark/taxonomy" not in undocumented_columns(tmp_path)
    # a trained model's folder holds its loss curve, not a table of the catalog
    model = tmp_path / "training" / "clarilm_sft"
    model.mkdir(parents=True)
    pl.DataFrame({"zz_step": [1]}).write_parquet(model / "loss_curve.parquet")
    assert "training/clarilm_sft" in undocumented_columns(tmp_path)
    (model / "training.json").write_text("{}")
    assert "training/clarilm_sft" not in undocumented_columns(tmp_path)


def test_columns_yaml_names_only_real_assets_and_every_entry_has_text():
    common, per_asset = column_docs()
    real = {k.to_user_string() for k in definitions.resolve_asset_graph().get_all_asset_keys()}
    real |= {f"training/{name}" for name in MODEL_NAMES}  # opt-in models (e.g. fm_log) are assets only when listed
    assert not sorted(set(per_asset) - real), "columns.yaml `assets:` keys that name no asset of the Definitions"
    empty = [f"{a}.{c}" for a, cols in per_asset.items() for c, text in cols.items() if not str(text or "").strip()]
    empty += [c for c, text in common.items() if not str(text or "").strip()]
    assert not empty, f"columns.yaml entries without text: {empty}"


def _clarilm(tmp_path, monkeypatch):
    return test_clarilm._run(tmp_path, monkeypatch, [logs, questions, facets, annotations],
                             questions={"max_selected": 4}, facets={"log_samples": 2},
                             annotations={"max_question_pairs": 1})


# Each case is one of tests/defs' in-process materializations (scripted LLM, fake embedder) into tmp_path.
@pytest.mark.parametrize(("materialize", "groups"), [
    (_clarilm, {"logs", "questions", "facets", "annotations"}),
    (test_assets._run, {"benchmark", "evaluation"}),
    (test_double_turn._run, {"double_turn"}),
    (test_intents._run, {"intents"}),
    (test_retrieval._run, {"retrieval"}),
], ids=["clarilm", "evaluation", "double_turn", "intents", "retrieval"])
def test_every_stored_column_has_a_description(tmp_path, monkeypatch, materialize, groups):
    result = materialize(tmp_path, monkeypatch)
    assert result.success
    _assert_documented(tmp_path / "assets", groups)
