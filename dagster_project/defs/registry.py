"""The group registry: one line per asset group, in pipeline order. definitions.py, preflight, `clarify metrics`,
the report index and the DVC stage generator loop over it. Adding a paper's group: a package defs/<group>/ with a
group.py declaring GROUP (lib/groups.GroupSpec), and its line here (docs/add-a-paper.md)."""

from __future__ import annotations

from dagster_project.defs.annotations.group import GROUP as annotations
from dagster_project.defs.benchmark.group import GROUP as benchmark
from dagster_project.defs.double_turn.group import GROUP as double_turn
from dagster_project.defs.evaluation.group import GROUP as evaluation
from dagster_project.defs.facets.group import GROUP as facets
from dagster_project.defs.headlines.group import GROUP as headlines
from dagster_project.defs.intents.group import GROUP as intents
from dagster_project.defs.logs.group import GROUP as logs
from dagster_project.defs.questions.group import GROUP as questions
from dagster_project.defs.retrieval.group import GROUP as retrieval
from dagster_project.defs.training.group import GROUP as training
from dagster_project.lib.groups import GroupSpec

GROUPS: tuple[GroupSpec, ...] = (
    benchmark, evaluation, double_turn, intents, retrieval, logs, questions, facets, annotations, training,
    headlines,
)


def group(name: str) -> GroupSpec:
    """The registry entry named `name`; KeyError lists the known groups."""
    for g in GROUPS:
        if g.name == name:
            return g
    raise KeyError(f"unknown group {name!r}; known: {[g.name for g in GROUPS]}")
