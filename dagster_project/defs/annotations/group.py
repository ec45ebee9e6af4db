"""Registry entry of ClariLM's annotations: CoTaP choices, preference pairs, SFT/DPO exports; it also writes
ClariLM's headline over its four groups (logs, questions, facets, annotations)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import polars as pl

from dagster_project.config import Params
from dagster_project.defs.annotations import assets
from dagster_project.lib.groups import GroupSpec
from dagster_project.lib.headlines import num, pass_rate, stage_rows
from dagster_project.lib.warehouse import read_asset

STAGE_ASSETS = ("cotap_annotations", "preference_pairs", "sft_dataset", "dpo_dataset", "sft_external_dataset")
# ClariLM's four stages: the assets whose rows and pass rate `clarify metrics` reports
CLARILM_ASSETS = (("logs", "log_candidates"), ("logs", "log_clarifications"),
                  ("questions", "seed_questions_ql"), ("questions", "seed_questions_qg"), ("questions", "question_set"),
                  ("facets", "facet_candidates_log"), ("facets", "facet_candidates_llm"), ("facets", "facet_candidates"),
                  *(("annotations", a) for a in STAGE_ASSETS))


def inputs(p: Params) -> list[tuple[str, str]]:
    """The sft_external training files, and the evaluation sets sft_external_dataset keeps out of them."""
    return [(f"annotations.sft_external.{n}.path", ds.path) for n, ds in p.annotations.sft_external.items()] + [
        (f"evaluation.external.{n}.path", ds.path) for n, ds in p.evaluation.external.items()
        if n in p.evaluation.datasets]


def headlines(base: Path) -> list[tuple[str, pl.DataFrame | None]]:
    return [("ClariLM stages: rows and pass rate (share kept, else share status ok)",
             stage_rows(base, "annotations", STAGE_ASSETS))]


def metrics(base: Path) -> dict | None:
    """Rows per ClariLM asset and its pass rate (share kept, or share with status ok); absent assets left out."""
    out: dict = {}
    for group, name in CLARILM_ASSETS:
        t = read_asset(base, group, name)
        if t is None:
            continue
        rate = pass_rate(t)
        out.setdefault(group, {})[name] = {"rows": t.height} | ({"pass_rate": num(rate)} if rate is not None else {})
    return out or None


GROUP = GroupSpec(
    name="annotations",
    build=lambda _p: dg.Definitions(assets=dg.load_assets_from_modules([assets])),
    params=("llm", "quality", "annotations", "evaluation.datasets", "evaluation.external"),
    inputs=inputs,
    headlines=headlines,
    metrics=("clarilm", metrics),
    metrics_reads=("logs", "questions", "facets"),
    refresh_after_logs=True,
    doc="ClariLM: CoTaP annotations, preference pairs, SFT and DPO exports",
)
