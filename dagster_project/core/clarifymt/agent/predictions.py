"""Which dialogue turns are evaluated, and the predictions table of one subject x method over them."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import polars as pl

from dagster_project.config import BENCHMARK_DATASET, EvaluationConfig
from dagster_project.core.clarifymt.agent.method import (
    Method,
    predictions_frame,
    turns_from_frame,
)
from dagster_project.core.shared.dedup import Embed
from dagster_project.core.shared.taxonomy import PERSONAS
from dagster_project.llm.task import Chat, Status

EVALUATED = [Status.OK.value, Status.PARSE_ERROR.value]  # invalid replies count as wrong; failures are excluded
KEEP = ["dataset", "dialogue_id", "query_id", "subtype", "persona", "turn", "reference_action", "reference_question"]
DIALOGUE_COLUMNS = [*KEEP, "n_turns", "messages", "status", "error"]


def evaluation_dialogues(cfg: EvaluationConfig, persona_dialogues: pl.DataFrame | None,
                         external: pl.DataFrame) -> pl.DataFrame:
    """The turns of every dataset in evaluation.datasets, in one schema, with a `dataset` column.

    persona_dialogues (the benchmark's) is read only when evaluation.datasets names clarifymt; None otherwise."""
    frames = []
    if BENCHMARK_DATASET in cfg.datasets:
        if persona_dialogues is None:
            raise ValueError(f"evaluation.datasets names {BENCHMARK_DATASET!r} but benchmark/persona_dialogues "
                             "was not given")
        frames.append(persona_dialogues.with_columns(dataset=pl.lit(BENCHMARK_DATASET)).select(DIALOGUE_COLUMNS))
    frames.append(external.filter(pl.col("dataset").is_in(cfg.datasets)).select(DIALOGUE_COLUMNS))
    return pl.concat(frames, how="vertical_relaxed")


def sample_dialogues(dialogues: pl.DataFrame, max_dialogues: int | None, seed: int,
                     persona_order: Sequence[str] = ()) -> list[str]:
    """Dialogue ids to evaluate: all of them, or ``max_dialogues`` spread evenly over personas.

    ``dialogues`` has one row per dialogue (dialogue_id, persona). The ids are shuffled with ``seed``,
    then taken round-robin across personas (in ``persona_order``, unknown/None last), so a sample of 6
    from the benchmark holds one dialogue per persona. The same ids are used for every method and
    subject, which keeps method comparisons paired.
    """
    ids = sorted(dialogues["dialogue_id"].unique().to_list())
    if max_dialogues is None or max_dialogues >= len(ids):
        return ids
    persona_of = dict(dialogues.select("dialogue_id", "persona").iter_rows())
    rng = random.Random(seed)
    rng.shuffle(ids)
    rank = {p: i for i, p in enumerate(persona_order)}
    groups: dict[Any, list[str]] = {}
    for d in ids:
        groups.setdefault(persona_of.get(d), []).append(d)
    order = sorted(groups, key=lambda p: (p not in rank, rank.get(p, 0), str(p)))
    picked: list[str] = []
    while len(picked) < max_dialogues:
        for p in order:
            if groups[p] and len(picked) < max_dialogues:
                picked.append(groups[p].pop(0))
    return sorted(picked)


def sampled_dialogues(cfg: EvaluationConfig, turns: pl.DataFrame) -> pl.DataFrame:
    """(dataset, dialogue_id) pairs evaluated: all, or evaluation.max_dialogues per dataset over personas."""
    order = [x.key for x in PERSONAS]
    picked = []
    for (dataset,), g in turns.group_by(["dataset"], maintain_order=True):
        dialogues = g.group_by("dialogue_id").agg(pl.col("persona").first())
        ids = sample_dialogues(dialogues, cfg.max_dialogues, cfg.sample_seed, order)
        picked += [{"dataset": dataset, "dialogue_id": d} for d in ids]
    return pl.DataFrame(picked, schema={"dataset": pl.Utf8, "dialogue_id": pl.Utf8})


def predict_turns(method: Method, subject: str, turns: pl.DataFrame, chat: Chat, embed: Embed,
                  blocked: str | None = None) -> pl.DataFrame:
    """One row per selected turn: the method's decision on usable turns, input_error rows for the others; with
    `blocked` (why the subject cannot answer, e.g. its trained model was not built) every turn is such a row."""
    ok = pl.col("status") == Status.OK.value
    usable, skipped = turns.filter(ok), turns.filter(~ok)
    if blocked:
        usable, skipped = turns.head(0), turns.with_columns(status=pl.lit(blocked))
    dialogue_turns = turns_from_frame(usable.with_columns(
        dialogue_id=pl.format("{}/{}", pl.col("dataset"), pl.col("dialogue_id"))))
    preds = method.predict(dialogue_turns, chat, embed)
    done = pl.concat([usable.select(KEEP), predictions_frame(preds)], how="horizontal")
    lost = skipped.select(*KEEP, "status").with_columns(
        action=pl.lit("invalid"), status=pl.lit(Status.INPUT_ERROR.value), llm_calls=pl.lit(0, pl.Int64),
        error=pl.lit(blocked) if blocked else pl.format("dialogue turn not usable: {}", pl.col("status")))
    out = pl.concat([done, lost], how="diagonal_relaxed").with_columns(
        subject=pl.lit(subject), method=pl.lit(method.name),
        source=pl.when(pl.col("dataset") == BENCHMARK_DATASET).then(pl.lit("benchmark.persona_dialogues"))
        .otherwise(pl.lit("evaluation.external_dialogues")))
    return out.select("subject", "method", *[c for c in out.columns if c not in ("subject", "method")])


def prediction_stats(out: pl.DataFrame) -> dict[str, int | float]:
    """Row counts by outcome, accuracy over evaluated turns and LLM calls per turn (asset metadata)."""
    done = out.filter(pl.col("status") != Status.INPUT_ERROR.value)
    evaluated = done.filter(pl.col("status").is_in(EVALUATED))
    return {
        "rows": out.height, "evaluated_turns": evaluated.height,
        "parse_errors": int((done["status"] == Status.PARSE_ERROR.value).sum()),
        "llm_errors": int((done["status"] == Status.LLM_ERROR.value).sum()), "input_errors": out.height - done.height,
        "invalid_outputs": int((done["action"] == "invalid").sum()),
        "protocol_compliance": round(float(evaluated["protocol_ok"].mean() or 0.0), 4)
        if "protocol_ok" in evaluated.columns else None,
        "accuracy": round(float((evaluated["action"] == evaluated["reference_action"]).mean() or 0.0), 4),
        "llm_calls_per_turn": round(float(done["llm_calls"].mean() or 0.0), 3),
    }
