"""What every headline asset needs: which trained models a paper's evaluation serves (and why one cannot be), the
template each was trained on, the reference subject, and an LLM resource that knows models no params line names."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from dagster_project.config import Params, RoleConfig
from dagster_project.config.llm import trained_role
from dagster_project.core.training.reference import reference_problem
from dagster_project.core.training.template import TrainedTemplate, load_trained_template
from dagster_project.lib.resources import LLMResource
from dagster_project.llm.trained import TRAINING_PREFIX, TrainedModelMissing

GROUP = "headlines"
SERVABLE = ("trained", "skipped_unchanged")  # training-table statuses that leave a model folder behind


@dataclass(frozen=True)
class TrainedSubject:
    """One trained model as a subject of its paper's evaluation: the subject name (its llm.subjects entry, or the
    model name), how it is served, the template it was trained on, and why it cannot be served (None when it can)."""

    subject: str
    model: str
    role: RoleConfig
    template: TrainedTemplate | None = None
    missing: str | None = None


def reference_subject(params: Params) -> str | None:
    """The untrained reference of every trained-vs-base comparison: evaluation.trained_baseline."""
    return params.evaluation.trained_baseline


def trained_subjects(params: Params, table: pl.DataFrame) -> list[TrainedSubject]:
    """Each model of a training asset's table as a subject: the llm.subjects entry serving `training/<model>` when
    there is one, else a subject of that name on the reference's backend settings (the intents sweep models have
    no params line). A model the training skipped, or whose folder is incomplete or records no template (trained
    before templates were recorded: retrain it), says why in `missing`."""
    by_model = {cfg.model: name for name, cfg in params.llm.subjects.items()}
    ref = reference_subject(params)
    ref_role = params.llm.subjects.get(ref or "")
    out = []
    for r in table.iter_rows(named=True):
        model = f"{TRAINING_PREFIX}{r['model']}"
        subject = by_model.get(model, r["model"])
        role = params.llm.subjects.get(subject) or trained_role(ref_role, model)
        missing, template = None, None
        if r["status"] not in SERVABLE:
            missing = f"training/{r['model']}: {r['status']} ({r['reason'] or 'no reason recorded'})"
        else:
            try:
                template = load_trained_template(model, subject)
            except TrainedModelMissing as err:
                missing = str(err)
        out.append(TrainedSubject(subject, model, role, template, missing))
    return out


def unfair_reference(params: Params, subject: TrainedSubject) -> str | None:
    """Why evaluation.trained_baseline is not a fair reference for `subject` (core/training/reference.py), or None."""
    ref = reference_subject(params)
    if ref is None or ref not in params.llm.subjects:
        return "no reference: evaluation.trained_baseline is not set"
    return reference_problem(subject.subject, subject.role, ref, params.llm.subjects[ref], params.training.base_model)


def with_subjects(llm: LLMResource, subjects: list[TrainedSubject]) -> LLMResource:
    """`llm` with the trained subjects params does not list added, on the same backends, cache and dry-run hook."""
    return llm.with_subjects({s.subject: s.role for s in subjects})
