"""The headline assets of the papers whose trained models training.models builds (an asset whose model is not
built has no input and is left out)."""

from __future__ import annotations

from typing import Any

import dagster as dg

from dagster_project.config import Params
from dagster_project.defs.headlines import double_turn, intents, retrieval


def build(params: Params) -> dg.Definitions:
    """intents_trained_conversations + intents_headline with training/intents_tuned; the double_turn Table 1
    assets with any double_turn model; retrieval_headline with training/reranker_finetuned and/or
    training/reranker_generative."""
    enabled = set(params.training.models)
    assets: list[Any] = []
    if "intents_tuned" in enabled:
        assets += [intents.intents_trained_conversations, intents.intents_headline]
    if double_turn.models(params):
        assets += [double_turn.trained_interactions_asset(params), double_turn.double_turn_table1,
                   double_turn.double_turn_comparisons]
    if enabled & set(retrieval.TRAINED_RERANKERS):
        assets.append(retrieval.retrieval_headline_asset(params))
    return dg.Definitions(assets=assets)
