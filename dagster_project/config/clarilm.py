"""params.yaml `logs`, `questions`, `facets` and `annotations` (ClariLM)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from dagster_project.config.base import Strict
from dagster_project.config.clarifymt import ExternalDatasetConfig
from dagster_project.config.dedup import DedupSearch


def _iso_date(value: str | None, key: str) -> None:
    if value is not None:
        import datetime as _dt

        try:
            _dt.date.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{key}: {value!r} is not an ISO date (YYYY-MM-DD)") from None


class LogsConfig(Strict):
    """ClariLM chat logs (group `logs`): where they are, what is malformed, the prefilter, the extraction."""

    paths: list[str] = Field(default_factory=lambda: ["data/logs/*.json", "data/logs/*.jsonl",
                                                      "data/logs/*.jsonl.gz", "data/logs/*.parquet"])
    max_message_chars: int = Field(20_000, gt=0)
    default_log_date: str | None = None  # ISO date for records without a timestamp; null -> file mtime
    date_from: str | None = None  # `clarify materialize logs` ingests only days in [date_from, date_to]
    date_to: str | None = None
    read_batch_size: int = Field(10_000, gt=0)
    sensor_interval_s: int = Field(60, ge=5)  # how often the logs_new_files sensor looks at logs.paths
    # cron strings of the nightly schedules (off until switched on in the UI): logs_backfill ingests the days not
    # materialized yet, clarilm_nightly refreshes questions / facets / annotations after new log days
    backfill_cron: str = "0 2 * * *"
    refresh_cron: str = "0 4 * * *"
    # FM-LOG signals to mine (core/clarilm/logs.SOURCES): the paper's user refinements and/or assistant questions
    sources: list[Literal["user_refinement", "assistant_asked"]] = Field(
        default_factory=lambda: ["user_refinement", "assistant_asked"], min_length=1)
    prefilter_max_chars: int | None = Field(None, gt=0)  # assistant_asked turns longer than this are dropped (None: no limit)
    max_extractions: int | None = Field(None, gt=0)
    extraction_temperature: float = Field(0.0, ge=0.0, le=2.0)

    @model_validator(mode="after")
    def _dates(self) -> LogsConfig:
        for key in ("default_log_date", "date_from", "date_to"):
            _iso_date(getattr(self, key), f"logs.{key}")
        if not self.paths:
            raise ValueError("logs.paths must list at least one file or glob pattern")
        return self


class TransformSplit(Strict):
    keep: float = Field(0.8, ge=0.0, le=1.0)
    enrich: float = Field(0.1, ge=0.0, le=1.0)
    simplify: float = Field(0.1, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _sums_to_one(self) -> TransformSplit:
        if abs(self.keep + self.enrich + self.simplify - 1.0) > 1e-6:
            raise ValueError("questions.transform_split: keep + enrich + simplify must add up to 1")
        return self


class QuestionsConfig(DedupSearch):
    """ClariLM Q^L (first questions from logs) and Q^G (persona-driven synthetic questions)."""

    ql_max_chars: int = Field(500, gt=0)
    ql_english_only: bool = True
    ql_language_min_score: float = Field(0.5, ge=0.0, le=1.0)  # confidence needed to call a question non-English
    ql_min_turns: int = Field(2, ge=1)
    ql_max_llm_checks: int | None = Field(None, gt=0)
    personas_path: str = "data/personas.jsonl"
    n_personas: int = Field(4, gt=0)
    questions_per_persona: int = Field(2, gt=0)
    icl_demos: int = Field(3, ge=0)
    seed_files: list[str] = Field(default_factory=list)
    transform_split: TransformSplit = Field(default_factory=TransformSplit)
    generation_temperature: float = Field(0.9, ge=0.0, le=2.0)
    dedup_tau: float = Field(0.85, gt=0.0, le=1.0)
    max_selected: int | None = Field(None, gt=0)  # size of Q sent on to CFD/OFS (null: all of Q^L + Q^G)
    test_fraction: float = Field(0.1, ge=0.0, lt=1.0)  # held-out share of the selected questions (never trained on)
    seed: int = 0


class FacetsConfig(DedupSearch):
    """ClariLM CFD: FM-LOG (k samples per query, exact dedup), FM-LLM (brainstorm), fusion (semantic dedup)."""

    log_samples: int = Field(3, gt=0)
    log_temperature: float = Field(0.9, ge=0.0, le=2.0)
    log_top_p: float = Field(0.95, gt=0.0, le=1.0)
    log_demos: int = Field(3, ge=0)
    llm_max_facets: int = Field(4, gt=0)
    dedup_tau: float = Field(0.8, gt=0.0, le=1.0)
    seed: int = 0


class AnnotationsConfig(Strict):
    """ClariLM OFS: CoTAP annotation, preference pairs, SFT/DPO exports."""

    max_candidates: int = Field(6, gt=0)
    max_question_pairs: int = Field(2, ge=0)
    answer_max_tokens: int = Field(160, gt=0)
    reasoning_max_tokens: int = Field(320, gt=0)
    system_prompt: str = ("Decide whether the user's request needs clarification. Start with 'Need clarification: "
                          "yes' and ask one clarifying question, or 'Need clarification: no' and answer.")
    export_jsonl: bool = True
    # annotations/sft_external_dataset: public datasets (their training files, not the evaluated ones) as SFT rows
    # in the same template, for the SFT-IN3 / SFT-Full baselines (training.models clarilm_sft_external / _full)
    sft_external: dict[str, ExternalDatasetConfig] = Field(default_factory=dict)
