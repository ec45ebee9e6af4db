"""The review-sheet round trip on materialized assets: export, fill in, rerun -> removals, kappa, r."""

import dagster as dg
import numpy as np
import polars as pl
from fakes import ScriptedBackend, schema_responder, scripted_llm

from dagster_project.runs.group_runs import materialize_group
from dagster_project.config import parse_params
from dagster_project.defs.benchmark import assets as benchmark
from dagster_project.defs.quality.checks import build_checks
from dagster_project.lib.io_manager import WarehouseIOManager


class OrthogonalEmbedder(dg.ConfigurableResource):
    def encode(self, texts: list[str]) -> np.ndarray:
        return np.eye(len(texts), dtype=np.float32)


def _materialize(tmp_path, responder, **benchmark):
    params = parse_params({"llm": {"cache_path": str(tmp_path / "cache.sqlite")},
                           "benchmark": {"n_per_subtype": 5, "subtypes": ["lexical", "scope"],
                                         "personas": ["precise"], **benchmark}})
    graph = dg.Definitions(assets=dg.load_assets_from_modules([benchmark_module()]))
    keys = {k for a in graph.assets or [] for k in a.keys}
    local = dg.Definitions.merge(graph, dg.Definitions(
        asset_checks=build_checks(keys), executor=dg.in_process_executor, resources={
            "io_manager": WarehouseIOManager(), "params": params,
            "llm": scripted_llm(params, ScriptedBackend(responder)), "embedder": OrthogonalEmbedder()}))
    results = materialize_group(local, "benchmark", dg.DagsterInstance.ephemeral())
    checks = [c for r in results for c in r.get_asset_check_evaluations()]
    assert all(r.success for r in results) and all(c.passed for c in checks), [
        (c.check_name, c.metadata) for c in checks if not c.passed]
    return {name: pl.read_parquet(tmp_path / f"assets/benchmark/{name}.parquet")
            for name in ("single_turn_queries", "review_sheet", "validated_queries", "annotation_agreement",
                         "persona_dialogues")}


def benchmark_module():
    return benchmark


def echoing(job, idx):
    """The generator echoes the prompt frame for one scope request; everything else as the schema responder."""
    text = schema_responder(job, idx)
    last = job.messages[-1]["content"]
    if "query" in (job.json_schema or {}).get("properties", {}) and "scope" in last and "(shopping)" in last:
        return text.replace('"query": "', '"query": "A user asked: ')
    return text


def test_automatic_path_then_filled_sheet_round_trip(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = _materialize(tmp_path, echoing)
    v, agree = first["validated_queries"], first["annotation_agreement"].row(0, named=True)
    # no sheet: the automatic filter removes the echoed prompt (it would have quality 4 and pass otherwise)
    echoed = v.filter(pl.col("query").str.starts_with("A user asked:"))
    assert echoed.height == 1 and echoed["removed_by"].to_list() == ["prompt_echo"]
    assert agree["path"] == "automatic" and agree["removed_prompt_echo"] == 1 and agree["kappa"] is None
    assert first["persona_dialogues"]["query_id"].n_unique() == 9  # 10 kept - 1 echo
    # the exported sheet: 10% of the 10 kept pairs -> 1 row, also as CSV for a spreadsheet
    sheet = pl.read_csv(tmp_path / "assets/benchmark/review_sheet.csv", infer_schema_length=0)
    assert sheet.height == 1 and sheet["item_id"].to_list() == first["review_sheet"]["item_id"].to_list()

    # the annotators fill a full sheet (fraction 1.0 exported) and the next run applies it
    full = _materialize(tmp_path, echoing, validation={"sheet_fraction": 1.0})["review_sheet"].sort("query_id")
    keep_1 = ["keep"] * 10
    keep_2 = ["keep"] * 8 + ["remove"] * 2
    filled = full.with_columns(keep_1=pl.Series(keep_1), keep_2=pl.Series(keep_2),
                               rating_1=pl.Series([str(x) for x in [5, 4, 4, 3, 5, 2, 4, 3, 1, 2]]),
                               rating_2=pl.Series([""] * 10))
    filled.write_csv(tmp_path / "filled.csv")
    second = _materialize(tmp_path, echoing, annotations_path=str(tmp_path / "filled.csv"))
    v, agree = second["validated_queries"], second["annotation_agreement"].row(0, named=True)
    assert agree["path"] == "human" and set(v["validation_path"].drop_nulls()) == {"human"}
    assert agree["removed_human"] == 2 and agree["removed_prompt_echo"] == 1 and agree["sheet_rows_matched"] == 10 and agree["sheet_rows_unmatched"] == 0
    assert agree["observed_agreement"] == 0.8 and agree["kappa"] == 0.0  # one annotator kept everything
    assert agree["pearson_r"] is None  # every judge rating is 4: r is undefined, not invented
    # the annotators' two removals, and the echo (removed on either path, although they kept it)
    assert v.filter(pl.col("removed_by").is_not_null())["removed_by"].sort().to_list() == [
        "human", "human", "prompt_echo"]
    assert second["persona_dialogues"]["query_id"].n_unique() == 7
