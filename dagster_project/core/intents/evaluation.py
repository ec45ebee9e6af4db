"""Held-out test conversations for every subject model and the evaluation table (Table 2 layout + OOD accuracy)."""

from __future__ import annotations

import polars as pl

from dagster_project.config import IntentsConfig
from dagster_project.core.intents.catalog import Catalog
from dagster_project.core.intents.scoring import score_conversations
from dagster_project.core.intents.simulation import (
    SCORED_OUTCOMES,
    ambiguous_seeds,
    empty_turns,
    simulate_conversations,
    unambiguous_seeds,
)
from dagster_project.core.intents.utterances import round_robin_sample
from dagster_project.core.shared.tables import markdown_table
from dagster_project.llm.chat import Message
from dagster_project.llm.task import Chat

SCORE_COLUMNS = ["conversation_id", "assistant_turn", "enough_info", "info_source", "ars", "relevance", "conciseness",
                 "repetition_avoidance", "factuality", "politeness", "quality", "A", "R", "sdrs", "score_status",
                 "score_error", "judge_calls", "info_raw_output", "quality_raw_output", "judge_repaired"]
PERCENT = {"ic_accuracy", "ood_accuracy", "ood_dropout_accuracy", "ambiguous_accuracy"}


def eval_conversations(chat: Chat, catalog: Catalog, demos: list[list[Message]], utterances: pl.DataFrame,
                       ambiguous: pl.DataFrame, cfg: IntentsConfig, subjects: list[str],
                       user_seed: int = 0) -> pl.DataFrame:
    """Every subject plays the assistant on the same test conversations (ambiguous and unambiguous test queries,
    user-provided OOD utterances, label-dropout OOD), all under cfg.max_turns; one row per message, with the
    judge's scores on the assistant rows of ambiguous and unambiguous conversations (OOD ones are not judged)."""
    names = catalog.names
    test = utterances.filter(~pl.col("is_ood") & (pl.col("split") == "test"))
    amb = ambiguous.filter(pl.col("kept") & (pl.col("split") == "test"))
    una = round_robin_sample(test, cfg.n_test_unambiguous, cfg.seed + 3)
    ood = round_robin_sample(utterances.filter(pl.col("is_ood")), cfg.n_test_ood, cfg.seed + 4)
    drop = round_robin_sample(test, cfg.n_test_dropout, cfg.seed + 5)
    frames = []
    for subject in subjects:
        prefix = f"{subject}/test/"
        seeds = (ambiguous_seeds(amb, names, cfg.max_turns, prefix)
                 + unambiguous_seeds(una, names, cfg.max_turns, prefix)
                 + unambiguous_seeds(ood, names, cfg.max_turns, prefix, kind="ood")
                 + unambiguous_seeds(drop, names, cfg.max_turns, prefix, kind="ood_dropout"))
        turns = simulate_conversations(seeds, chat, catalog, demos, cfg, f"subject:{subject}", user_seed)
        scores = score_conversations(turns.filter(pl.col("kind").is_in(["ambiguous", "unambiguous"])), chat,
                                     catalog, cfg)
        scores = scores.select(SCORE_COLUMNS).rename({"info_raw_output": "judge_info_raw",
                                                      "quality_raw_output": "judge_quality_raw"})
        frames.append(turns.join(scores, on=["conversation_id", "assistant_turn"], how="left")
                      .with_columns(subject=pl.lit(subject)))
    out = pl.concat(frames, how="diagonal_relaxed") if frames else \
        empty_turns().with_columns(subject=pl.lit(None, pl.Utf8))
    return out.select("subject", *[c for c in out.columns if c != "subject"])


def intent_eval_table(turns: pl.DataFrame, scores: pl.DataFrame) -> pl.DataFrame:
    """Per subject: IC accuracy on unambiguous queries, mean SDRS (per conversation), mean ARS and the five quality
    means (per assistant turn), the accuracy on ambiguous queries, OOD accuracy (user-provided OOD utterances and
    label dropout on test utterances: the final prediction within the turn limit is "out of domain"; the subject may
    ask first, and mean_turns_ood says how often it did), and counts. Conversations that failed outside the
    assistant (llm_error, user_error) are excluded from every share and counted in `excluded`. SDRS and the judge
    means cover n_scored of the n_total judged kinds (ambiguous + unambiguous); n_judge_failed lost their score to a
    failed judge call, so a shrinking mean is visible, and the eval_conversations check bounds that rate."""
    conv = turns.group_by(["subject", "conversation_id"]).agg(
        pl.col("kind").first(), pl.col("outcome").first(), pl.col("n_assistant_turns").first(),
        pl.col("llm_calls").first())
    valid = pl.col("outcome").is_in(list(SCORED_OUTCOMES))
    correct = (pl.col("outcome") == "correct").cast(pl.Float64)

    def acc(kind: str, name: str) -> list[pl.Expr]:
        sel = (pl.col("kind") == kind) & valid
        return [correct.filter(sel).mean().alias(name), sel.sum().alias(f"n_{kind}")]

    a = conv.group_by("subject").agg(
        *acc("unambiguous", "ic_accuracy"), *acc("ambiguous", "ambiguous_accuracy"), *acc("ood", "ood_accuracy"),
        *acc("ood_dropout", "ood_dropout_accuracy"),
        pl.col("n_assistant_turns").filter((pl.col("kind") == "ambiguous") & valid).mean()
        .alias("mean_turns_ambiguous"),
        pl.col("n_assistant_turns").filter(pl.col("kind").is_in(["ood", "ood_dropout"]) & valid).mean()
        .alias("mean_turns_ood"),
        (~valid).sum().alias("excluded"), pl.col("llm_calls").sum().alias("assistant_user_calls"))
    sc = scores.filter(pl.col("kind").is_in(["ambiguous", "unambiguous"]))
    b = sc.group_by("subject").agg(
        pl.col("sdrs").filter(pl.col("assistant_turn") == 1).mean().alias("sdrs"),
        pl.col("ars").mean().alias("ars"),
        pl.col("relevance").mean().alias("rel"), pl.col("conciseness").mean().alias("con"),
        pl.col("repetition_avoidance").mean().alias("ra"), pl.col("factuality").mean().alias("fac"),
        pl.col("politeness").mean().alias("pol"),
        pl.col("conversation_id").filter(pl.col("sdrs").is_not_null()).n_unique().alias("n_scored"),
        pl.col("conversation_id").filter(pl.col("score_status").str.starts_with("judge_")).n_unique()
        .alias("n_judge_failed"),
        pl.col("relevance").is_not_null().sum().alias("n_rated_turns"))
    out = a.join(b, on="subject", how="left").with_columns(
        n_total=pl.col("n_unambiguous") + pl.col("n_ambiguous"),
        n_scored=pl.col("n_scored").fill_null(0), n_judge_failed=pl.col("n_judge_failed").fill_null(0))
    cols = ["subject", "ic_accuracy", "sdrs", "ars", "rel", "con", "ra", "fac", "pol", "ood_accuracy",
            "ood_dropout_accuracy", "ambiguous_accuracy", "mean_turns_ambiguous", "mean_turns_ood", "n_unambiguous",
            "n_ambiguous", "n_ood", "n_ood_dropout", "n_total", "n_scored", "n_judge_failed", "n_rated_turns",
            "excluded", "assistant_user_calls"]
    return out.select(cols).sort("subject")


def eval_markdown(df: pl.DataFrame) -> str:
    """A Markdown table: accuracies in %, other floats (SDRS, ARS, ratings, turns, percentiles) as plain numbers."""
    return markdown_table(df, plain=[c for c in df.columns if c not in PERCENT])
