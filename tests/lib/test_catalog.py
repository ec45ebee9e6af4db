"""The Dagster catalog: standard metadata on every materialization, and code_version from code + prompts."""

import shutil
from pathlib import Path

import dagster as dg
import numpy as np
import polars as pl
from fakes import ScriptedBackend, schema_responder, scripted_llm

from dagster_project.runs.group_runs import materialize_group
from dagster_project.config import parse_params
from dagster_project.definitions import defs
from dagster_project.defs.benchmark import assets as benchmark
from dagster_project.defs.evaluation import assets as evaluation
from dagster_project.lib.catalog import PREVIEW_MAX_ROWS, describe, table_metadata
from dagster_project.lib.code_version import (
    PROMPTS_DIR,
    code_files,
    code_versions,
    compute_fn,
)
from dagster_project.lib.io_manager import WarehouseIOManager
from dagster_project.lib.warehouse import read_asset


class TextEmbedder(dg.ConfigurableResource):
    """Each distinct text its own axis: no semantic duplicates."""

    def encode(self, texts: list[str]) -> np.ndarray:
        return np.eye(len(texts), dtype=np.float32)


def test_table_metadata_row_count_schema_descriptions_and_small_preview():
    small = pl.DataFrame({"subtype": ["lexical"], "status": ["ok"], "undocumented_col": [1]})
    meta = table_metadata(small, "benchmark/taxonomy")
    assert meta["dagster/row_count"] == 1
    cols = {c.name: c for c in meta["dagster/column_schema"].columns}
    assert cols["subtype"].description == describe("benchmark/taxonomy", "subtype") == "key of the ambiguity subtype"
    assert cols["status"].description.startswith("LLM outcome")  # the shared description
    assert cols["undocumented_col"].description is None and cols["undocumented_col"].type == "Int64"
    assert meta["preview"].records[0].data == {"subtype": "lexical", "status": "ok", "undocumented_col": 1}
    big = pl.DataFrame({"n": list(range(PREVIEW_MAX_ROWS + 1))})
    assert "preview" not in table_metadata(big, "g/a") and table_metadata(big, "g/a")["dagster/row_count"] == 21


def test_every_asset_of_the_demo_graph_is_stored_by_the_catalog_io_manager_with_a_code_version():
    graph = defs.resolve_asset_graph()
    assert isinstance(defs.resources["io_manager"], WarehouseIOManager)
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        if node.is_materializable:
            assert node.assets_def.get_io_manager_key_for_asset_key(key) == "io_manager", key
            assert node.code_version and len(node.code_version) == 12, key


def test_benchmark_group_emits_row_count_schema_with_descriptions_and_preview(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    params = parse_params({"llm": {"cache_path": str(tmp_path / "cache.sqlite")},
                           "benchmark": {"n_per_subtype": 2, "subtypes": ["lexical", "scope"]},
                           "quality": {"max_error_rate": 0.2}, "evaluation": {"methods": ["base"]}})
    local = dg.Definitions(assets=dg.load_assets_from_modules([benchmark]), executor=dg.in_process_executor,
                           resources={"io_manager": WarehouseIOManager(), "params": params, "embedder": TextEmbedder(),
                                      "llm": scripted_llm(params, ScriptedBackend(schema_responder))})
    with dg.DagsterInstance.ephemeral() as instance:
        results = materialize_group(local, "benchmark", instance)
    assert results and all(r.success for r in results)
    mats = {m.asset_key.to_user_string(): m.metadata for r in results
            for m in (e.step_materialization_data.materialization for e in r.get_asset_materialization_events())}
    expected = {k.to_user_string() for a in dg.load_assets_from_modules([benchmark]) for k in a.keys}
    assert set(mats) == expected
    for name, meta in mats.items():
        frame = read_asset(tmp_path / "assets", *name.split("/"))
        assert meta["dagster/row_count"].value == frame.height, name
        columns = meta["dagster/column_schema"].schema.columns
        assert [c.name for c in columns] == frame.columns, name
        missing = [c.name for c in columns if not c.description]
        assert not missing, f"{name}: describe {missing} in dagster_project/defs/<group>/columns.yaml"
    assert len(mats["benchmark/taxonomy"]["preview"].records) == 16  # 16 subtypes x 7 columns: shown
    assert "preview" not in mats["benchmark/single_turn_queries"]  # 22 columns: too wide to preview


def _executable(assets) -> dict[str, dg.AssetsDefinition]:
    return {k.to_user_string(): a for a in assets if isinstance(a, dg.AssetsDefinition) and a.is_executable
            for k in a.keys}


def test_prompt_edit_changes_the_code_version_of_the_assets_that_use_it_and_no_other(tmp_path):
    prompts = tmp_path / "prompts"
    shutil.copytree(PROMPTS_DIR, prompts)
    params = parse_params({})
    assets = [*dg.load_assets_from_modules([benchmark]), *evaluation.build(params).assets]
    before = code_versions(assets, prompts)
    with (prompts / "generate_single_turn.txt").open("a") as f:
        f.write("\nOne more instruction.\n")
    after = code_versions(assets, prompts)
    changed = {k.to_user_string() for k in before if before[k] != after[k]}
    assert changed == {"benchmark/single_turn_queries"}

    (prompts / "judge_question.txt").write_text((PROMPTS_DIR / "judge_question.txt").read_text() + "\nBe strict.\n")
    again = code_versions(assets, prompts)
    assert {k.to_user_string() for k in after if after[k] != again[k]} == {"evaluation/judge_scores"}


def test_every_prompt_template_is_reached_by_some_asset():
    """The walk from asset code to LLMTasks finds every template (so an edit to any flags its assets stale)."""
    used = {p for a in _executable(defs.assets).values() for p in code_files(compute_fn(a))[1]}
    assert used == {p.stem for p in Path(PROMPTS_DIR).glob("*.txt")}
