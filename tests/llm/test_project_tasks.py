"""Every LLM step of the project is an LLMTask: its template exists, its reply schema is one the backends accept,
and the dry-run planner's placeholder for that schema passes the step's own validation (so `clarify plan` runs
every downstream asset)."""

import importlib
import json
import pkgutil
import random

import jsonschema
import pytest

import dagster_project.core as core
from dagster_project.llm.plan import placeholder
from dagster_project.llm.task import LLMTask


def project_tasks() -> dict[str, LLMTask]:
    found = {}
    for mod in pkgutil.walk_packages(core.__path__, core.__name__ + "."):
        module = importlib.import_module(mod.name)
        for name, value in vars(module).items():
            if isinstance(value, LLMTask) and value.__class__ is LLMTask:
                fmt = f"[{value.fmt}]" if value.fmt else ""  # one template, two reply formats: two steps
                found.setdefault(f"{value.prompt}{fmt}:{value.role}", value)
    return found


TASKS = project_tasks()


def test_the_llm_steps_are_tasks():
    assert len(TASKS) >= 20
    assert all(t.template for t in TASKS.values())


@pytest.mark.parametrize("name", sorted(k for k, t in TASKS.items() if t.reply is not None))
def test_placeholder_reply_validates(name):
    task = TASKS[name]
    jsonschema.Draft202012Validator.check_schema(task.schema)
    assert "$ref" not in json.dumps(task.schema) and "title" not in task.schema
    for seed in range(3):
        value = placeholder(task.schema, random.Random(seed))
        jsonschema.validate(value, task.schema)
        task.reply.model_validate(value)
