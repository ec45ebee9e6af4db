"""params.yaml as pydantic models: every knob of the pipeline, validated once with errors that name the key.

One module per family of sections (llm.py, clarifymt.py, clarilm.py, groups.py); `Params` ties them together and
`load_params` reads and validates a file. definitions.py calls it once and builds every resource from the result.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from pydantic import Field, ValidationError, model_validator

from dagster_project.config.base import Strict
from dagster_project.config.clarifymt import (
    BENCHMARK_DATASET,
    CLARILM_DATASET,
    METHOD_NAMES,
    BenchmarkConfig,
    EvaluationConfig,
    ExternalDatasetConfig,
    MethodName,
)
from dagster_project.config.clarilm import (
    AnnotationsConfig,
    FacetsConfig,
    LogsConfig,
    QuestionsConfig,
    TransformSplit,
)
from dagster_project.config.groups import (
    DoubleTurnConfig,
    DoubleTurnInput,
    IntentsConfig,
    RetrievalConfig,
)
from dagster_project.config.llm import (
    ROLE_NAMES,
    EmbedderConfig,
    LLMConfig,
    QualityConfig,
    RoleConfig,
)
from dagster_project.config.sql import SqlConfig
from dagster_project.config.training import MODEL_NAMES, TrainingConfig

__all__ = [
    "BENCHMARK_DATASET", "CLARILM_DATASET", "METHOD_NAMES", "ROLE_NAMES", "AnnotationsConfig", "BenchmarkConfig", "DoubleTurnConfig",
    "DoubleTurnInput", "EmbedderConfig", "EvaluationConfig", "ExternalDatasetConfig", "FacetsConfig", "IntentsConfig",
    "LLMConfig", "LogsConfig", "MODEL_NAMES", "MethodName", "Params", "ParamsError", "QualityConfig", "QuestionsConfig",
    "RetrievalConfig", "RoleConfig", "TrainingConfig", "TransformSplit", "default_params_path", "definition_params", "load_params",
    "parse_params",
]


class Params(Strict):
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
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    sql: SqlConfig = Field(default_factory=SqlConfig)

    @model_validator(mode="after")
    def _known_subjects(self) -> Params:
        unknown = sorted(set(self.evaluation.subject_methods) - set(self.llm.subjects))
        if unknown:
            raise ValueError(f"evaluation.subject_methods: unknown subject(s) {unknown}; "
                             f"llm.subjects has {sorted(self.llm.subjects)}")
        bad = sorted(set(self.intents.subjects or []) - set(self.untrained_subjects()))
        if bad:
            raise ValueError(f"intents.subjects: {bad} not among the untrained llm.subjects {self.untrained_subjects()}")
        ev = self.evaluation
        named = {ev.trained_baseline} if ev.trained_baseline else set()
        named |= {s for pair in ev.trained_pairs for s in pair}
        unknown = sorted(named - set(self.llm.subjects))
        if unknown:
            raise ValueError(f"evaluation.trained_baseline / trained_pairs: unknown subject(s) {unknown}; "
                             f"llm.subjects has {sorted(self.llm.subjects)}")
        unknown = sorted({s for pair in ev.judge_subject_pairs for s in pair} - set(self.llm.subjects))
        if unknown:
            raise ValueError(f"evaluation.judge_subject_pairs: unknown subject(s) {unknown}; "
                             f"llm.subjects has {sorted(self.llm.subjects)}")
        return self

    def untrained_subjects(self) -> list[str]:
        """Subjects not served from a trained model: the ones double_turn and intents evaluate (a trained model is
        built from those groups' own exports, so it is evaluated downstream, in the evaluation group)."""
        return [name for name, cfg in self.llm.subjects.items() if not cfg.model.startswith("training/")]

    def trained_pairs(self) -> list[tuple[str, str]]:
        """(subject, reference) comparisons: each trained subject vs evaluation.trained_baseline, then trained_pairs."""
        ev = self.evaluation
        pairs = [(name, ev.trained_baseline) for name, cfg in self.llm.subjects.items()
                 if ev.trained_baseline and cfg.model.startswith("training/") and name != ev.trained_baseline]
        pairs += [(a, b) for a, b in ev.trained_pairs if (a, b) not in pairs]
        return pairs


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


def _merge(base: dict, over: dict) -> dict:
    """`over` on top of `base`: mappings merge key by key, anything else replaces."""
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def read_params_file(path: Path, seen: tuple[Path, ...] = ()) -> dict | None:
    """A params file as a plain, unvalidated mapping; `extends: <file>` (relative to it) reads that file first and
    overlays this one on it."""
    if not path.exists():
        raise ParamsError(f"{path}: file not found (run from the repo root or set CLARIFY_PARAMS)")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ParamsError(f"{path}: not valid YAML: {err}") from None
    if data is not None and not isinstance(data, dict):
        raise ParamsError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    if not data or "extends" not in data:
        return data
    base = path.parent / str(data.pop("extends"))
    if base.resolve() in seen:
        raise ParamsError(f"{path}: extends: {base} makes a cycle")
    return _merge(read_params_file(base, (*seen, path.resolve())) or {}, data)


def load_params(path: str | Path = "params.yaml") -> Params:
    path = Path(path)
    return parse_params(read_params_file(path), str(path))


def default_params_path() -> str:
    """params.yaml, or the file named by CLARIFY_PARAMS (what `clarify materialize --params` sets)."""
    return os.environ.get("CLARIFY_PARAMS", "params.yaml")


def definition_params() -> Params:
    """The params the code location is built from: params.yaml when present, else the defaults."""
    path = Path(default_params_path())
    return load_params(path) if path.exists() else Params()
