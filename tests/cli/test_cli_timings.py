"""`clarify timings`: per stage wall time vs the model's own time, from the Dagster run history (newest invocation
of each group), and the total line `make demo` ends with."""

import time

import dagster as dg
import psutil
from fakes import ScriptedBackend  # tests/fakes.py, on sys.path via tests/conftest.py
from typer.testing import CliRunner

from dagster_project import cli
from dagster_project.config import parse_params
from dagster_project.lib.resources import LLMResource
from dagster_project.llm.chat import ChatRequest
from dagster_project.reporting.timings import stage_timings, total_line
from dagster_project.runs.group_runs import materialize_group
from dagster_project.runs.instance import (
    GROUP_TAG,
    INVOCATION_STARTED_TAG,
    INVOCATION_TAG,
    ensure_dagster_yaml,
    invocation_tags,
)


class Timed(ScriptedBackend):
    """Every job took 1.5 s of model time (a number the backend reports, as llama.cpp's does)."""

    def generate(self, jobs):
        outs = super().generate(jobs)
        for o in outs:
            o.model_s = 1.5
        return outs


def _defs(tmp_path, prompts: int) -> dg.Definitions:
    llm = LLMResource(parse_params({"llm": {"cache_path": str(tmp_path / "c.sqlite"),
                                            "roles": {"default": {"model": "m"}}}}).llm,
                      backends={"llamacpp": lambda cfg: Timed(lambda job, i: "ok")})

    @dg.asset(group_name="g", partitions_def=dg.StaticPartitionsDefinition(["a", "b"]))
    def asks(context: dg.AssetExecutionContext) -> None:
        chat = llm.session(context)
        chat("judge", [ChatRequest.of([{"role": "user", "content": f"{context.partition_key}{i}"}], "p@1")
                       for i in range(prompts)])
        context.add_output_metadata(chat.usage())

    @dg.asset(group_name="h")
    def quiet() -> None:
        return None

    return dg.Definitions(assets=[asks, quiet], executor=dg.in_process_executor)


def _invocation(group: str, inv: str) -> dict[str, str]:
    return {GROUP_TAG: group, INVOCATION_TAG: inv, INVOCATION_STARTED_TAG: f"{time.time():.2f}"}


def test_timings_report_the_newest_invocation_per_group_with_its_model_time(tmp_path, monkeypatch):
    home = tmp_path / "dagster"
    home.mkdir()
    ensure_dagster_yaml(home)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with dg.DagsterInstance.get() as instance:
        old = _defs(tmp_path / "old", prompts=1)  # an earlier run of g: 2 partitions x 1 call
        assert all(r.success for r in materialize_group(old, "g", instance, tags=_invocation("g", "i1")))
        new = _defs(tmp_path / "new", prompts=3)  # the newest: 2 partitions x 3 calls of 1.5 s
        assert all(r.success for r in materialize_group(new, "g", instance, tags=_invocation("g", "i2")))
        assert all(r.success for r in materialize_group(new, "h", instance, tags=_invocation("h", "i3")))
        materialize_group(new, "h", instance, tags={GROUP_TAG: "h"})  # no invocation tag (UI-like): not counted
        stages = stage_timings(instance)
    assert [s.group for s in stages] == ["g", "h"]
    g, h = stages
    assert (g.runs, g.calls, g.cache_hits, g.model_s, g.failed) == (2, 6, 0, 9.0, 0)
    assert (h.runs, h.calls, h.model_s) == (1, 0, 0.0)
    assert g.wall_s > 0 and h.wall_s > 0
    assert total_line(stages).startswith("model 0.1 min of ")

    out = CliRunner().invoke(cli.app, ["timings"], env={"COLUMNS": "160", "DAGSTER_HOME": str(home)})
    assert out.exit_code == 0, out.output
    rows = {line.split()[0]: line.split() for line in out.output.splitlines() if line.split()[:1] in (["g"], ["h"])}
    assert rows["g"][3] == "2" and rows["g"][5] == "9.0" and rows["g"][7] == "6"  # runs, model s, calls
    assert out.output.strip().splitlines()[-1] == total_line(stages)
    only_h = CliRunner().invoke(cli.app, ["timings", "--group", "h"], env={"DAGSTER_HOME": str(home)})
    assert "in 1 stage" in only_h.output and " g " not in only_h.output


def test_timings_without_history_says_how_to_make_one(tmp_path):
    out = CliRunner().invoke(cli.app, ["timings"], env={"DAGSTER_HOME": str(tmp_path / "empty")})
    assert out.exit_code == 1 and "no Dagster run history" in out.output


def test_invocation_tags_are_new_per_command_and_carry_the_process_start():
    a, b = invocation_tags(), invocation_tags()
    assert a[INVOCATION_TAG] != b[INVOCATION_TAG]
    assert float(a[INVOCATION_STARTED_TAG]) == round(psutil.Process().create_time(), 2)
