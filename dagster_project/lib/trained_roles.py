"""LLM roles served by a trained model (`llm.roles.<key>: {backend: transformers, model: training/<name>}`): which
groups read a training folder at run time, and how the generated dvc.yaml treats that read (docs/fm-log.md).

Every LLM step a group asks through such a role must send the model the prompt it was trained on (the template its
training.json records), else `clarify dvc-stages` fails naming the params key. The folder is never an asset
dependency (the asset graph stays acyclic; the backend reads it when the step runs). In dvc.yaml it is a dep of the
group's stage, except where the training stage runs after that group (facets -> annotations -> training): a dep
would close a cycle, so the stage only says in its `desc` that it reads the folder, and it is run in two passes."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from dagster_project.config import LLMConfig, Params
from dagster_project.llm.task import LLMTask
from dagster_project.llm.trained import training_name

TRAINING_GROUP = "training"


class Learned(Protocol):
    """The parts of a trained model's template (core/training/template.TrainedTemplate) compared with a prompt."""

    name: str
    system: str
    user: str


class TrainedRoleError(ValueError):
    """A role that points at a trained model the group cannot use (another prompt than the one it learned)."""


@dataclass(frozen=True)
class TrainedRead:
    """Group `group` asks `model` through params key llm.roles.<key>; `cycle` is the stage path training ... ->
    group when the training stage runs after the group (empty when it does not)."""

    group: str
    key: str
    model: str
    cycle: tuple[str, ...] = ()

    def desc(self) -> str:
        """The stage's dvc.yaml `desc` for a read that cannot be a dep."""
        return (f"Reads {self.model} at run time (params.yaml llm.roles.{self.key}); not a dep: the training stage "
                f"runs after this one ({' -> '.join(reversed(self.cycle))}), so a dep would close a cycle. Two passes: "
                f"build {self.model} first, then set the role; after retraining it, `dvc repro -f -s {self.group}` "
                "and `dvc repro` (docs/fm-log.md).")


def role_key(llm: LLMConfig, role: str) -> str:
    """The llm.roles key that answers `role`, as LLMConfig.role falls back: the role, its base name, `default`."""
    return next((k for k in (role, role.split(":", 1)[0]) if k in llm.roles), "default")


def chain(upstream: Mapping[str, Iterable[str]], start: str, goal: str) -> tuple[str, ...]:
    """The shortest path start -> ... -> goal following each stage's upstream groups, or () when goal is not
    upstream of start."""
    came: dict[str, str | None] = {start: None}
    todo = deque([start])
    while todo:
        node = todo.popleft()
        if node == goal and node != start:
            path = [node]
            while (prev := came[path[-1]]) is not None:
                path.append(prev)
            return tuple(reversed(path))
        for nxt in upstream.get(node, ()):
            if nxt not in came:
                came[nxt] = node
                todo.append(nxt)
    return ()


def trained_reads(params: Params, tasks: Mapping[str, Iterable[LLMTask]], upstream: Mapping[str, Iterable[str]],
                  learned_template: Callable[[str, Params], Learned]) -> list[TrainedRead]:
    """Per group (its LLM steps in `tasks`), each trained model one of its roles points at; TrainedRoleError naming
    the params key when a step's prompt is not the one the model was trained on (learned_template(name, params):
    the training group's model_template), or no template is known for it."""
    out: dict[tuple[str, str], TrainedRead] = {}
    for group, steps in tasks.items():
        for task in steps:
            name = training_name(params.llm.role(task.role).model)
            if name is None:
                continue
            key = role_key(params.llm, task.role)
            model = f"training/{name}"
            try:
                learned = learned_template(name, params)
            except KeyError as err:
                raise TrainedRoleError(f"params.yaml llm.roles.{key}: {err.args[0]}") from None
            prompt = task.template
            if learned.system != prompt.system or not learned.user.startswith(prompt.user.rstrip()):
                raise TrainedRoleError(
                    f"params.yaml llm.roles.{key}: {model} was trained on the {learned.name!r} prompt, but the "
                    f"{group} group asks role {task.role!r} with prompt {task.prompt!r}; point a role only that "
                    f"step asks at it (for fm_log: llm.roles[\"extractor:fm_log\"], docs/fm-log.md)")
            out[(group, model)] = TrainedRead(group, key, model, chain(upstream, TRAINING_GROUP, group))
    return list(out.values())


def apply_reads(stages: dict[str, dict], reads: Iterable[TrainedRead]) -> None:
    """Each read into its group's dvc.yaml stage: the training folder as a dep, or (where that closes a cycle) a
    `desc` that names the run-time read and the two-pass run."""
    for read in reads:
        st = stages[read.group]
        if read.cycle:
            stages[read.group] = {"desc": " ".join(filter(None, [st.get("desc"), read.desc()])),
                                  **{k: v for k, v in st.items() if k != "desc"}}
        elif f"assets/{TRAINING_GROUP}" not in st["deps"]:
            st["deps"].insert(0, f"assets/{TRAINING_GROUP}")
