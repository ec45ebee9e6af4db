"""params.yaml `benchmark` and `evaluation` (ClarifyMT-Bench)."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field, model_validator

from dagster_project.config.base import Strict
from dagster_project.config.names import PERSONA_KEYS, QUERY_SUBTYPE_KEYS
from dagster_project.config.dedup import DedupSearch


class GeneratorShare(Strict):
    """One generator model of the query pool (paper App. B: GPT-4.1 ~25%, DeepSeek-V3 ~25%, GPT-5 ~45%)."""

    role: str = Field("generator", description="generator, or generator:<name> configured in llm.roles")
    share: float = Field(1.0, gt=0.0, le=1.0)


class SeedDatasetConfig(Strict):
    """Items taken from an existing clarification dataset (paper App. B: ~5% from CLAMBER)."""

    name: str = "clamber"
    format: Literal["clamber", "clariq", "generic"] = "clamber"
    path: str = "data/external/clamber_sample.jsonl"
    share: float = Field(0.05, ge=0.0, lt=1.0, description="share of the pool (n_per_subtype x subtypes)")


class ValidationConfig(Strict):
    """Manual validation round trip (paper §4.2) and the automatic filter that stands in without a sheet."""

    sheet_fraction: float = Field(0.1, gt=0.0, le=1.0, description="paper: 10% double-annotated")
    sheet_seed: int = 0
    on_disagreement: Literal["remove", "keep"] = "remove"
    min_quality: int = Field(3, ge=1, le=5, description="automatic: judge rating below this -> removed (1: off)")
    subtype_check: bool = True


class BenchmarkConfig(DedupSearch):
    n_per_subtype: int = Field(2, gt=0, description="paper: 85")
    generation_temperature: float = Field(0.9, ge=0.0, le=2.0)
    simulation_temperature: float = Field(0.7, ge=0.0, le=2.0)
    dedup_tau: float = Field(0.7, gt=0.0, le=1.0)
    subtypes: list[str] | None = None
    personas: list[str] | None = None
    generators: list[GeneratorShare] = Field(default_factory=lambda: [GeneratorShare()], min_length=1)
    seed_dataset: SeedDatasetConfig | None = Field(None, description="null: every item is generated")
    annotations_path: str | None = Field(None, description="a filled review sheet; null: automatic filter")
    validation: ValidationConfig = Field(default_factory=ValidationConfig)

    @model_validator(mode="after")
    def _generator_shares(self) -> BenchmarkConfig:
        roles = [g.role for g in self.generators]
        bad = [r for r in roles if r != "generator" and not r.startswith("generator:")]
        if bad:
            raise ValueError(f"benchmark.generators: role {bad[0]!r} must be 'generator' or 'generator:<name>'")
        if len(set(roles)) != len(roles):
            raise ValueError(f"benchmark.generators: roles repeat: {roles}")
        if abs(sum(g.share for g in self.generators) - 1.0) > 1e-6:
            raise ValueError(f"benchmark.generators: shares must sum to 1, got {sum(g.share for g in self.generators)}")
        return self

    @model_validator(mode="after")
    def _known_names(self) -> BenchmarkConfig:
        for field, names, known in (
            ("subtypes", self.subtypes, set(QUERY_SUBTYPE_KEYS)),
            ("personas", self.personas, set(PERSONA_KEYS)),
        ):
            bad = sorted(set(names or []) - known)
            if bad:
                raise ValueError(f"benchmark.{field}: unknown {bad}; known: {sorted(known)}")
        return self


MethodName = Literal[
    "base", "majority_vote", "cot", "intent_sim", "at_cot", "clarify_agent",
    "clarify_agent_no_planner", "clarify_agent_no_perceiver", "clarify_agent_no_forecaster",
    "intent_sim_interpretations", "at_cot_subtypes",
]
"""Every evaluated method (the one list: core/clarifymt/agent/registry.py builds exactly these)."""
METHOD_NAMES: tuple[str, ...] = get_args(MethodName)
BENCHMARK_DATASET = "clarifymt"
CLARILM_DATASET = "clarilm_test"  # annotations/held_out_set: ClariLM's held-out split with CoTAP's reference action


class ExternalDatasetConfig(Strict):
    """A public clarification dataset on disk, imported into the dialogue/turn schema (io/formats/)."""

    format: Literal["clamber", "clariq", "in3", "generic"]
    path: str
    limit: int | None = Field(None, gt=0, description="read at most this many records")
    clariq_clarify_from: int = Field(2, ge=1, le=4, description="ClariQ clarification_need >= this -> clarify")
    max_field_chars: int = Field(20_000, gt=0, description="a record with a longer text value is quarantined "
                                                            "(oversized_field) before anything is written")


class EvaluationConfig(Strict):
    """ClarifyMT-Bench evaluation: methods x subjects, datasets, method knobs (read by the methods directly), judge."""

    methods: list[MethodName] = Field(default_factory=lambda: ["base"])
    subject_methods: dict[str, list[MethodName]] = Field(
        default_factory=dict, description="subject -> the methods it runs (a subset of methods); unlisted: all")
    dataset_methods: dict[str, list[MethodName]] | None = Field(
        None, description="dataset -> the methods run on it (evaluation.methods narrowed to these); unlisted: "
                          "all; entries for datasets not in `datasets` are ignored; null (what a preset sets to undo "
                          "params.yaml's entries): every method everywhere")
    trained_baseline: str | None = Field(None, description="the untrained subject every trained subject "
                                                           "(model training/<name>) is compared with")
    trained_pairs: list[list[str]] = Field(default_factory=list, description="more [subject, reference] comparisons")
    trained_method: MethodName = Field("base", description="the method trained subjects are compared with")
    datasets: list[str] = Field(default_factory=lambda: [BENCHMARK_DATASET])
    trained_datasets: list[str] | None = Field(
        None, description="the datasets (of `datasets`) that subjects served from training/<name> and their "
                          "references (trained_baseline, trained_pairs) are evaluated on; null: every dataset")
    external: dict[str, ExternalDatasetConfig] = Field(default_factory=dict)
    max_dialogues: int | None = Field(None, gt=0, description="per dataset; null = every dialogue (paper)")
    sample_seed: int = 0
    subject_max_tokens: int = Field(64, gt=0)
    reasoning_max_tokens: int = Field(192, gt=0, description="CoT / AT-CoT replies")
    agent_max_tokens: int = Field(160, gt=0, description="each ClarifyAgent module")
    vote_k: int = Field(5, ge=1, description="paper: 5")
    vote_temperature: float = Field(0.7, ge=0.0, le=2.0)
    intent_k: int = Field(5, ge=2, description="paper: 5")
    intent_temperature: float = Field(0.7, ge=0.0, le=2.0)
    intent_tau: float = Field(0.5, ge=-1.0, le=1.0, description="same intent at similarity >= tau (paper: 0.5)")
    intent_entropy_threshold: float = Field(0.0, ge=0.0, description="intent_sim asks above this entropy (nats)")
    comparison_turn: int = Field(2, ge=1, description="paper Table 5 compares methods at turn 2")
    agent_method: MethodName = "clarify_agent"
    significance_alpha: float = Field(0.05, gt=0.0, lt=1.0)
    min_n_significance: int = Field(10, ge=1, description="never significant with fewer paired queries")
    ttest_min_n: int = Field(30, ge=2, description="paired queries from which the clustered t-test decides; "
                                                   "below (or where it is undefined): exact sign-flip test")
    significance_baselines: list[MethodName] = Field(
        default_factory=lambda: ["base", "majority_vote", "cot", "intent_sim", "at_cot"],
        description="the methods agent_method is tested against (Holm-corrected); the others are descriptive only")
    clarify_must_be_question: bool = Field(False, description="the paper's action-only accuracy (false); true: a "
                                                              "clarify reply that is no question counts wrong")
    structured_output: bool = Field(False, description="every method replies in JSON; false = the paper's prefixes")
    judge_per_subtype: int = Field(2, ge=0, description="paper: 30")
    judge_pairs: list[list[MethodName]] = Field(default_factory=list)
    judge_subject_pairs: list[list[str]] = Field(
        default_factory=list, description="[subject_a, subject_b]: win/tie/lose of one model against another, both "
                                          "with trained_method (ClariLM Fig. 4)")
    judge_subject_datasets: list[str] | None = Field(
        None, description="the datasets judge_subject_pairs are judged on; their subjects are evaluated on these too "
                          "(besides trained_datasets); null: every dataset both subjects were evaluated on")
    pairwise_mode: Literal["output", "reference_question"] = Field(
        "output", description="output: whole replies, no reference (ClariLM §4.6.2); reference_question: "
                              "questions only, against the reference question")
    pairwise_items: int = Field(100, ge=0, description="output mode: items per dataset (ClariLM: 100)")
    bertscore: bool = True
    bertscore_layers: int = Field(6, ge=1)

    @model_validator(mode="after")
    def _consistent(self) -> EvaluationConfig:
        if len(set(self.methods)) != len(self.methods):
            raise ValueError("evaluation.methods: a method is listed twice")
        known = {BENCHMARK_DATASET, CLARILM_DATASET, *self.external}
        bad = sorted(set(self.datasets) - known)
        if bad:
            raise ValueError(f"evaluation.datasets: unknown {bad}; known: {sorted(known)} "
                             "(add external ones under evaluation.external)")
        if self.trained_datasets is not None:
            extra = sorted(set(self.trained_datasets) - set(self.datasets))
            if extra or not self.trained_datasets:
                raise ValueError(f"evaluation.trained_datasets: {extra or 'an empty list'} not in evaluation.datasets "
                                 f"{self.datasets} (null: every dataset)")
        for reserved in {BENCHMARK_DATASET, CLARILM_DATASET} & set(self.external):
            raise ValueError(f"evaluation.external: {reserved!r} is reserved for the project's own held-out set")
        for subject, chosen in self.subject_methods.items():
            extra = sorted(set(chosen) - set(self.methods))
            if extra or not chosen:
                raise ValueError(f"evaluation.subject_methods.{subject}: {extra or 'an empty list'} "
                                 f"not in evaluation.methods {self.methods}")
        # entries for datasets not evaluated are ignored, so a preset or test that narrows `datasets` / `external`
        # need not also edit this mapping
        for dataset in set(self.dataset_methods or {}) & set(self.datasets):
            chosen = self.methods_on(dataset)
            if not chosen:
                raise ValueError(f"evaluation.dataset_methods.{dataset}: none of evaluation.methods {self.methods}")
            if self.trained_method not in chosen and (
                    self.trained_baseline or self.trained_pairs or self.judge_subject_pairs):
                raise ValueError(f"evaluation.dataset_methods.{dataset}: leaves out trained_method "
                                 f"{self.trained_method!r}, which the trained comparisons run on every dataset")
        bad_pairs = [p for p in self.trained_pairs if len(p) != 2 or p[0] == p[1]]
        if bad_pairs:
            raise ValueError(f"evaluation.trained_pairs: each entry is two different subjects, got {bad_pairs[0]}")
        if (self.trained_baseline or self.trained_pairs) and self.trained_method not in self.methods:
            raise ValueError(f"evaluation.trained_method {self.trained_method!r} is not in evaluation.methods")
        for pair in self.judge_pairs:
            if len(pair) != 2 or pair[0] == pair[1]:
                raise ValueError(f"evaluation.judge_pairs: each entry is two different methods, got {pair}")
            missing = sorted(set(pair) - set(self.methods))
            if missing:
                raise ValueError(f"evaluation.judge_pairs: {missing} not in evaluation.methods")
        self._subject_pairs_consistent()
        return self

    def _subject_pairs_consistent(self) -> None:
        """judge_subject_pairs: two different subjects that both run trained_method; judge_subject_datasets: not
        empty (names not in evaluation.datasets are not evaluated, so nothing is judged there). (Unknown subjects are reported by Params, which knows llm.subjects.)"""
        for pair in self.judge_subject_pairs:
            if len(pair) != 2 or pair[0] == pair[1]:
                raise ValueError(f"evaluation.judge_subject_pairs: each entry is two different subjects, got {pair}")
            idle = [s for s in pair if self.trained_method not in self.methods_for(s)]
            if idle:
                raise ValueError(f"evaluation.judge_subject_pairs: {idle} do not run trained_method "
                                 f"{self.trained_method!r} (evaluation.subject_methods / methods)")
        if self.judge_subject_datasets is not None and not self.judge_subject_datasets:
            raise ValueError("evaluation.judge_subject_datasets: an empty list (null: every dataset both were "
                             "evaluated on; to judge no subject pair, set judge_subject_pairs: [])")

    def methods_on(self, dataset: str) -> list[str]:
        """The methods run on `dataset`: evaluation.methods, narrowed to its dataset_methods entry if it has one."""
        chosen = (self.dataset_methods or {}).get(dataset)
        return [m for m in self.methods if chosen is None or m in chosen]

    def methods_for(self, subject: str) -> list[str]:
        """The methods `subject` is evaluated with: its evaluation.subject_methods entry, else every method."""
        return list(self.subject_methods.get(subject, self.methods))
