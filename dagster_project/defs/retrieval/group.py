"""Registry entry of ClariMM-style retrieval: clarification QA -> sessions, inferred queries, rankers, metrics."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import polars as pl

from dagster_project.config import Params
from dagster_project.defs.retrieval import assets
from dagster_project.lib.groups import GroupSpec
from dagster_project.lib.headlines import nest, pick
from dagster_project.lib.warehouse import read_asset

INPUT_KEYS = ("qa_path", "documents_path", "qrels_path")


def _ranking(c: str) -> bool:
    return c == "mrr" or c.startswith(("ndcg_at_", "p_at_"))


def inputs(p: Params) -> list[tuple[str, str]]:
    return [(f"retrieval.{k}", getattr(p.retrieval, k)) for k in INPUT_KEYS]


def headlines(base: Path) -> list[tuple[str, pl.DataFrame | None]]:
    return [("overall ranking quality (retrieval_metrics)", pick(
        read_asset(base, "retrieval", "retrieval_metrics"), ["ranker", "input", "modality", "n_queries"], _ranking,
        ("breakdown", "overall")))]


def metrics(base: Path) -> dict | None:
    """MRR, nDCG@k and P@k (overall) per ranker x input x modality."""
    t = read_asset(base, "retrieval", "retrieval_metrics")
    if t is None or t.is_empty():
        return None
    cols = [c for c in t.columns if _ranking(c)]
    return nest(t.filter(pl.col("breakdown") == "overall").to_dicts(), ["ranker", "input", "modality"],
                ["n_queries", *cols]) or None


GROUP = GroupSpec(
    name="retrieval",
    build=lambda _p: dg.Definitions(assets=dg.load_assets_from_modules([assets])),
    params=("llm", "embedder", "quality", "retrieval"),
    inputs=inputs,
    headlines=headlines,
    metrics=("retrieval", metrics),
    doc="Multi-turn retrieval with clarification: sessions, inferred queries, BM25 / dense / generative rankers",
)
