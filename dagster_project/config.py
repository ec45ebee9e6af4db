"""Pydantic models for params.yaml: every knob of the pipeline, validated with errors that name the key."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class RoleConfig(_Strict):
    """One model behind a role: which backend, which model, and its sampling defaults."""

    backend: Literal["llamacpp", "openai", "vllm"] = "llamacpp"
    model: str = "smollm2-135m-instruct"
    base_url: str | None = None
    api_key_env: str | None = None
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(256, gt=0)
    seed: int = 0
    concurrency: int = Field(8, gt=0)
    timeout_s: float = Field(120.0, gt=0)
    max_retries: int = Field(3, ge=0)
    n_ctx: int = Field(2048, gt=0)
    n_threads: int | None = None
    engine_kwargs: dict[str, object] = Field(default_factory=dict)
    # openai backend: how a JSON schema is sent. "json_schema" is OpenAI's / vLLM's format;
    # "json_object" sends {"type": "json_object", "schema": ...} (llama-cpp-python's server).
    json_format: Literal["json_schema", "json_object"] = "json_schema"
    price_in_per_mtok: float = Field(0.0, ge=0.0)
    price_out_per_mtok: float = Field(0.0, ge=0.0)

    @model_validator(mode="after")
    def _openai_needs_endpoint(self) -> RoleConfig:
        if self.backend == "openai" and not self.base_url:
            raise ValueError("backend 'openai' needs base_url (e.g. https://api.openai.com/v1)")
        return self

    def identity(self) -> dict[str, str]:
        """What identifies the model for the cache: never the key, URL or timeout."""
        return {"backend": self.backend, "model": self.model}


ROLE_NAMES = (
    "generator", "extractor", "reasoner", "user_simulator", "judge",
    "answerer", "clarifier", "assistant", "reranker",
)


class LLMConfig(_Strict):
    cache_path: str = ".cache/llm_cache.sqlite"
    roles: dict[str, RoleConfig] = Field(default_factory=lambda: {"default": RoleConfig()})
    subjects: dict[str, RoleConfig] = Field(default_factory=lambda: {"smollm2": RoleConfig()})

    @model_validator(mode="after")
    def _known_roles(self) -> LLMConfig:
        if "default" not in self.roles:
            raise ValueError("llm.roles must define 'default' (the fallback for unset roles)")
        unknown = set(self.roles) - set(ROLE_NAMES) - {"default"}
        if unknown:
            raise ValueError(f"unknown role(s) {sorted(unknown)}; known roles: {['default', *ROLE_NAMES]}")
        if not self.subjects:
            raise ValueError("llm.subjects must list at least one subject model")
        return self

    def role(self, name: str) -> RoleConfig:
        """The config for a role, a subject ('subject:<name>'), or the default."""
        if name.startswith("subject:"):
            sub = name.split(":", 1)[1]
            if sub not in self.subjects:
                raise KeyError(f"unknown subject {sub!r}; params.yaml llm.subjects has {sorted(self.subjects)}")
            return self.subjects[sub]
        return self.roles.get(name, self.roles["default"])


class EmbedderConfig(_Strict):
    model: str = "all-MiniLM-L6-v2"
    batch_size: int = Field(64, gt=0)


class QualityConfig(_Strict):
    max_error_rate: float = Field(0.2, ge=0.0, le=1.0)


class BenchmarkConfig(_Strict):
    n_per_subtype: int = Field(2, gt=0, description="paper: 85")
    generation_temperature: float = Field(0.9, ge=0.0, le=2.0)
    simulation_temperature: float = Field(0.7, ge=0.0, le=2.0)
    dedup_tau: float = Field(0.7, gt=0.0, le=1.0)
    dedup_block: int = Field(2048, gt=0)
    subtypes: list[str] | None = None
    personas: list[str] | None = None
    annotations_path: str | None = None

    @model_validator(mode="after")
    def _known_names(self) -> BenchmarkConfig:
        from dagster_project.core.shared.taxonomy import PERSONAS, QUERY_SUBTYPES

        for field, names, known in (
            ("subtypes", self.subtypes, {s.key for s in QUERY_SUBTYPES}),
            ("personas", self.personas, {p.key for p in PERSONAS}),
        ):
            bad = sorted(set(names or []) - known)
            if bad:
                raise ValueError(f"benchmark.{field}: unknown {bad}; known: {sorted(known)}")
        return self


MethodName = Literal[
    "base", "majority_vote", "cot", "intent_sim", "at_cot", "clarify_agent",
    "clarify_agent_no_planner", "clarify_agent_no_perceiver", "clarify_agent_no_forecaster",
]
"""Every evaluated method (the one list: core/clarifymt/agent/registry.py builds exactly these)."""
METHOD_NAMES: tuple[str, ...] = get_args(MethodName)
BENCHMARK_DATASET = "clarifymt"


class ExternalDatasetConfig(_Strict):
    """A public clarification dataset on disk, imported into the dialogue/turn schema (io/formats/)."""

    format: Literal["clamber", "clariq", "generic"]
    path: str
    limit: int | None = Field(None, gt=0, description="read at most this many records")
    clariq_clarify_from: int = Field(2, ge=1, le=4, description="ClariQ clarification_need >= this -> clarify")


class EvaluationConfig(_Strict):
    """ClarifyMT-Bench evaluation: methods x subjects, datasets, method knobs (read by the methods directly), judge."""

    methods: list[MethodName] = Field(default_factory=lambda: ["base"])
    datasets: list[str] = Field(default_factory=lambda: [BENCHMARK_DATASET])
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
    intent_tau: float = Field(0.5, ge=-1.0, le=1.0, description="mean pairwise similarity below tau -> ask")
    comparison_turn: int = Field(2, ge=1, description="paper Table 5 compares methods at turn 2")
    agent_method: MethodName = "clarify_agent"
    significance_alpha: float = Field(0.05, gt=0.0, lt=1.0)
    judge_per_subtype: int = Field(2, ge=0, description="paper: 30")
    judge_pairs: list[list[MethodName]] = Field(default_factory=list)
    bertscore: bool = True
    bertscore_layers: int = Field(6, ge=1)

    @model_validator(mode="after")
    def _consistent(self) -> EvaluationConfig:
        if len(set(self.methods)) != len(self.methods):
            raise ValueError("evaluation.methods: a method is listed twice")
        known = {BENCHMARK_DATASET, *self.external}
        bad = sorted(set(self.datasets) - known)
        if bad:
            raise ValueError(f"evaluation.datasets: unknown {bad}; known: {sorted(known)} "
                             "(add external ones under evaluation.external)")
        if BENCHMARK_DATASET in self.external:
            raise ValueError(f"evaluation.external: {BENCHMARK_DATASET!r} is reserved for the generated benchmark")
        for pair in self.judge_pairs:
            if len(pair) != 2 or pair[0] == pair[1]:
                raise ValueError(f"evaluation.judge_pairs: each entry is two different methods, got {pair}")
            missing = sorted(set(pair) - set(self.methods))
            if missing:
                raise ValueError(f"evaluation.judge_pairs: {missing} not in evaluation.methods")
        return self


def _iso_date(value: str | None, key: str) -> None:
    if value is not None:
        import datetime as _dt

        try:
            _dt.date.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{key}: {value!r} is not an ISO date (YYYY-MM-DD)") from None


class LogsConfig(_Strict):
    """ClariLM chat logs (group `logs`): where they are, what is malformed, the prefilter, the extraction."""

    paths: list[str] = Field(default_factory=lambda: ["data/logs/*.json", "data/logs/*.jsonl",
                                                      "data/logs/*.jsonl.gz", "data/logs/*.parquet"])
    max_message_chars: int = Field(20_000, gt=0)
    default_log_date: str | None = None  # ISO date for records without a timestamp; null -> file mtime
    partition_start: str = "2024-01-01"  # first daily partition of the logs group
    date_from: str | None = None  # `clarify materialize logs` ingests only days in [date_from, date_to]
    date_to: str | None = None
    read_batch_size: int = Field(10_000, gt=0)
    prefilter_max_chars: int = Field(300, gt=0)
    max_extractions: int | None = Field(None, gt=0)
    extraction_temperature: float = Field(0.0, ge=0.0, le=2.0)

    @model_validator(mode="after")
    def _dates(self) -> LogsConfig:
        for key in ("default_log_date", "partition_start", "date_from", "date_to"):
            _iso_date(getattr(self, key), f"logs.{key}")
        if not self.paths:
            raise ValueError("logs.paths must list at least one file or glob pattern")
        return self


class TransformSplit(_Strict):
    keep: float = Field(0.8, ge=0.0, le=1.0)
    enrich: float = Field(0.1, ge=0.0, le=1.0)
    simplify: float = Field(0.1, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _sums_to_one(self) -> TransformSplit:
        if abs(self.keep + self.enrich + self.simplify - 1.0) > 1e-6:
            raise ValueError("questions.transform_split: keep + enrich + simplify must add up to 1")
        return self


class QuestionsConfig(_Strict):
    """ClariLM Q^L (first questions from logs) and Q^G (persona-driven synthetic questions)."""

    ql_max_chars: int = Field(500, gt=0)
    ql_english_only: bool = True
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
    dedup_block: int = Field(2048, gt=0)
    max_selected: int | None = Field(None, gt=0)  # size of Q sent on to CFD/OFS (null: all of Q^L + Q^G)
    seed: int = 0


class FacetsConfig(_Strict):
    """ClariLM CFD: FM-LOG (k samples per query, exact dedup), FM-LLM (brainstorm), fusion (semantic dedup)."""

    log_samples: int = Field(3, gt=0)
    log_temperature: float = Field(0.9, ge=0.0, le=2.0)
    log_top_p: float = Field(0.95, gt=0.0, le=1.0)
    log_demos: int = Field(3, ge=0)
    llm_max_facets: int = Field(4, gt=0)
    dedup_tau: float = Field(0.8, gt=0.0, le=1.0)
    dedup_block: int = Field(2048, gt=0)
    seed: int = 0


class AnnotationsConfig(_Strict):
    """ClariLM OFS: CoTAP annotation, preference pairs, SFT/DPO exports."""

    max_candidates: int = Field(6, gt=0)
    max_question_pairs: int = Field(2, ge=0)
    answer_max_tokens: int = Field(160, gt=0)
    reasoning_max_tokens: int = Field(320, gt=0)
    system_prompt: str = ("Decide whether the user's request needs clarification. Start with 'Need clarification: "
                          "yes' and ask one clarifying question, or 'Need clarification: no' and answer.")
    export_jsonl: bool = True


class IntentsConfig(_Strict):
    """Intent classification with clarification (seed: "Scaling Intent Understanding"). Demo sizes; paper sizes
    in params.yaml comments."""

    dataset: str = "data/intents/utterances.csv"       # text, intent, optional split (CSV / JSONL / JSON / Parquet)
    catalog: str = "data/intents/catalog.jsonl"        # name, description, examples
    few_shot: str | None = "data/intents/few_shot.jsonl"  # demo dialogues for the assistant prompt ({"messages": [...]})
    ambiguous_dataset: str | None = "data/intents/ambiguous.jsonl"  # optional ambiguous queries you already have
    ood_label: str = "out_of_domain"                   # rows with this intent are out-of-domain test utterances
    test_fraction: float = Field(0.3, ge=0.0, lt=1.0)  # only for rows without a split
    seed: int = 0
    examples_per_intent: int = Field(2, ge=0)          # catalogue examples shown in prompts
    generation_temperature: float = Field(0.7, ge=0.0, le=2.0)
    n_edit_train: int = Field(3, ge=0)                 # edit method: source utterances per split
    n_edit_test: int = Field(2, ge=0)
    n_pair_train: int = Field(1, ge=0)                 # intent-pair method: pairs per split (2 queries each)
    n_pair_test: int = Field(1, ge=0)
    n_unambiguous_train: int = Field(4, ge=0)          # single-turn conversations from tagged utterances
    max_turns: int = Field(3, gt=0)                    # assistant turns per conversation
    structured_output: bool = True                     # assistant replies as JSON (false: the paper's plain text)
    assistant_max_tokens: int = Field(96, gt=0)
    user_temperature: float = Field(0.7, ge=0.0, le=2.0)
    judge_unambiguous: bool = False                    # false: unambiguous queries carry enough information by construction
    alpha: float = Field(0.5, ge=0.0, le=1.0)          # SDRS weight on A
    keep_percentile: float = Field(85.0, gt=0.0, le=100.0)
    require_correct: bool = True                       # never train on a conversation whose final intent is wrong
    sweep_percentiles: list[float] = Field(default_factory=lambda: [100.0, 90.0, 85.0, 80.0, 75.0, 65.0])
    ood_fraction: float = Field(0.2, ge=0.0, le=1.0)   # label dropout share of unambiguous training conversations
    n_test_unambiguous: int = Field(3, ge=0)
    n_test_ood: int = Field(2, ge=0)                   # user-provided out-of-domain utterances
    n_test_dropout: int = Field(2, ge=0)               # label-dropout OOD made from unambiguous test utterances


class RetrievalConfig(_Strict):
    """Multi-turn (multimodal) clarification for search (seed: ClariMM / Mario). Demo sizes; paper sizes in
    params.yaml comments."""

    qa_path: str = "data/retrieval/clarification_qa.tsv"   # ClariQ/Melon shape: TSV (as-is), CSV, JSONL or Parquet
    documents_path: str = "data/retrieval/documents.jsonl"  # JSONL doc_id, text, optional title (or CSV/TSV/Parquet)
    qrels_path: str = "data/retrieval/qrels.txt"           # TREC qrels: qid 0 doc_id rel (qid = facet id)
    turn_lengths: list[int] = Field(default_factory=lambda: [2, 3, 4])
    per_length: int = Field(3, gt=0)                       # sessions sampled per length (paper: 10,000)
    seed: int = 0
    similar_check: bool = True                             # Appendix A prompt A: drop sessions with repeated QA
    reveal_cut: bool = True                                # Appendix A prompt B: cut at the facet-revealing turn
    rewrite_answers: bool = True                           # Algorithm 1: conceal -> hint -> reveal rewrites
    refine_temperature: float = Field(0.7, ge=0.0, le=2.0)
    first_stage_k: int = Field(100, gt=0)                  # BM25 depth (paper: 100)
    rerank_depth: int = Field(10, gt=0)                    # BM25 candidates the generative re-ranker sees
    generate_top: int = Field(3, gt=0)                     # keyword IDs it generates, one constrained step each
    keywords_per_doc: int = Field(5, gt=0)                 # YAKE keywords per keyword ID (paper: 5)
    keyword_ngram: int = Field(2, ge=1, le=3)
    snippet_chars: int = Field(120, ge=0)                  # document text shown next to each ID
    rankers: list[Literal["bm25", "bm25_history", "dense_rerank", "generative_rerank"]] = Field(
        default_factory=lambda: ["bm25", "bm25_history", "dense_rerank", "generative_rerank"])
    inputs: list[Literal["multi_turn", "single_turn"]] = Field(
        default_factory=lambda: ["multi_turn", "single_turn"])
    reranker_vision: bool = False                          # true only if the reranker model accepts images
    ks: list[int] = Field(default_factory=lambda: [1, 3, 5])

    @model_validator(mode="after")
    def _sane(self) -> RetrievalConfig:
        if not self.turn_lengths or any(n < 2 for n in self.turn_lengths):
            raise ValueError("retrieval.turn_lengths: lengths must be >= 2 (a session has at least two turns)")
        if len(set(self.turn_lengths)) != len(self.turn_lengths):
            raise ValueError("retrieval.turn_lengths: lengths must be distinct")
        if self.generate_top > self.rerank_depth:
            raise ValueError("retrieval.generate_top must be <= retrieval.rerank_depth")
        if self.rerank_depth > self.first_stage_k:
            raise ValueError("retrieval.rerank_depth must be <= retrieval.first_stage_k")
        if not self.rankers or not self.inputs or not self.ks or any(k < 1 for k in self.ks):
            raise ValueError("retrieval: rankers, inputs and ks (>= 1) must not be empty")
        return self


class DoubleTurnInput(_Strict):
    """One open-domain QA file whose questions carry several acceptable answers (io/formats: ambigqa, nq_open,
    qa_generic)."""

    path: str
    format: Literal["ambigqa", "nq_open", "generic"]
    split: Literal["train", "eval", "both"] = Field(
        "both", description="train: SFT data + preference labelling; eval: answer_set_eval; both: all")
    answers_are_aliases: bool = Field(False, description="nq_open: a record's answers are aliases of ONE answer")


class DoubleTurnConfig(_Strict):
    """Double-turn preferences (Zhang, Knox & Choi): sizes, sampling and evaluation knobs."""

    inputs: list[DoubleTurnInput] = Field(default_factory=lambda: [
        DoubleTurnInput(path="data/double_turn/demo_ambigqa.json", format="ambigqa"),
        DoubleTurnInput(path="data/double_turn/demo_nq_open.jsonl", format="nq_open")])
    max_queries: int | None = Field(4, gt=0, description="per use (train / eval), half ambiguous; null = all")
    seed: int = 0
    rounds: int = Field(1, gt=0, description="Y_model sampling rounds; paper: 10")
    n_shots: int = Field(3, ge=0, description="few-shot exemplars per answerer prompt; paper: 5")
    sample_temperature: float = Field(1.0, ge=0.0, le=2.0, description="paper: T=1.0")
    sft_min_answers: int = Field(2, ge=1, description="feasible answers needed to make a clarifying SFT example")
    n_clarify_sampled: int = Field(1, ge=0, description="sampled clarifying questions besides the greedy one; paper: 5")
    clarify_temperature: float = Field(1.0, ge=0.0, le=2.0)
    n_direct_samples: int = Field(3, gt=0, description="Direct-Ans sampled; paper: 20, top-k kept")
    subjects: list[str] | None = Field(None, description="subject models to evaluate; null = all llm.subjects")
    final_answerer: Literal["answerer", "subject"] = Field(
        "answerer", description="who answers after the clarifying turn (paper: a separate Turn-4 model)")
    random_repeats: int = Field(200, gt=0, description="draws of the random clarify-or-answer baseline")
    answer_max_tokens: int = Field(32, gt=0)
    generator_max_tokens: int = Field(220, gt=0)
    subject_max_tokens: int = Field(48, gt=0)
    subject_output: Literal["free_text", "json"] = Field(
        "free_text", description="free_text: the paper's protocol; json: schema-enforced for weak models")

    @model_validator(mode="after")
    def _has_inputs(self) -> DoubleTurnConfig:
        if not self.inputs:
            raise ValueError("double_turn.inputs: list at least one QA file")
        return self


class Params(_Strict):
    llm: LLMConfig = Field(default_factory=LLMConfig)
    embedder: EmbedderConfig = Field(default_factory=EmbedderConfig)
    quality: QualityConfig = Field(default_factory=QualityConfig)
    benchmark: BenchmarkConfig = Field(default_factory=BenchmarkConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    intents: IntentsConfig = Field(default_factory=IntentsConfig)
    logs: LogsConfig = Field(default_factory=LogsConfig)
    questions: QuestionsConfig = Field(default_factory=QuestionsConfig)
    facets: FacetsConfig = Field(default_factory=FacetsConfig)
    annotations: AnnotationsConfig = Field(default_factory=AnnotationsConfig)
    retrieval: RetrievalConfig = Field(default_factory=RetrievalConfig)
    double_turn: DoubleTurnConfig = Field(default_factory=DoubleTurnConfig)


class ParamsError(ValueError):
    """params.yaml is missing, unreadable or invalid; the message names file and key."""


def _describe(err: ValidationError, source: str) -> str:
    lines = [f"{source}: {err.error_count()} invalid setting(s)"]
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "<root>"
        msg = "unknown key (not a setting)" if e["type"] == "extra_forbidden" else e["msg"]
        lines.append(f"  - {key}: {msg} (got {e.get('input')!r})" if e["type"] != "extra_forbidden"
                     else f"  - {key}: {msg}")
    return "\n".join(lines)


def parse_params(data: dict, source: str = "params.yaml") -> Params:
    """Validate a params mapping; raise ParamsError naming every bad key."""
    try:
        return Params.model_validate(data or {})
    except ValidationError as err:
        raise ParamsError(_describe(err, source)) from None


def load_params(path: str | Path = "params.yaml") -> Params:
    path = Path(path)
    if not path.exists():
        raise ParamsError(f"{path}: file not found (run from the repo root or set CLARIFY_PARAMS)")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ParamsError(f"{path}: not valid YAML: {err}") from None
    if data is not None and not isinstance(data, dict):
        raise ParamsError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return parse_params(data, str(path))


def default_params_path() -> str:
    """params.yaml, or the file named by CLARIFY_PARAMS (what `clarify materialize --params` sets)."""
    return os.environ.get("CLARIFY_PARAMS", "params.yaml")


def definition_params() -> Params:
    """The params the code location is built from: params.yaml when present, else the defaults."""
    path = Path(default_params_path())
    return load_params(path) if path.exists() else Params()
