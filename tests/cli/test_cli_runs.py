"""`clarify materialize` runs: provenance tags, Dagster telemetry off in a new dagster.yaml, INFO-level console."""

import subprocess
from pathlib import Path

import dagster as dg
import pytest
from typer.testing import CliRunner

from dagster_project import cli
from dagster_project.runs import group_runs
from dagster_project.config import parse_params
from dagster_project.runs.instance import (
    COMMIT_TAG,
    DAGSTER_YAML,
    DIRTY_TAG,
    GROUP_TAG,
    INVOCATION_STARTED_TAG,
    INVOCATION_TAG,
    PARAMS_TAG,
    STAGE_TAG,
    ensure_dagster_yaml,
    git_tags,
    params_hash,
    provenance_tags,
)

REPO = Path(__file__).resolve().parents[2]


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                   capture_output=True)


def test_git_tags_name_the_commit_and_whether_tracked_files_changed(tmp_path):
    assert git_tags(tmp_path) == {}  # outside git: no tags, no error
    _git(tmp_path, "init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "dvc.lock").write_text("stages: {}\n")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "init")
    sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tmp_path, capture_output=True,
                         text=True, check=True).stdout.strip()
    assert git_tags(tmp_path) == {COMMIT_TAG: sha, DIRTY_TAG: "false"}
    (tmp_path / "dvc.lock").write_text("stages: {a: {}}\n")  # rewritten by `dvc repro` after each stage
    (tmp_path / "new_untracked.txt").write_text("?")
    assert git_tags(tmp_path)[DIRTY_TAG] == "false"
    (tmp_path / "code.py").write_text("x = 2\n")
    assert git_tags(tmp_path) == {COMMIT_TAG: sha, DIRTY_TAG: "true"}


def test_provenance_tags_carry_group_stage_and_params_hash(tmp_path, monkeypatch):
    monkeypatch.delenv("DVC_STAGE", raising=False)
    small, large = parse_params({"benchmark": {"n_per_subtype": 2}}), parse_params({"benchmark": {"n_per_subtype": 3}})
    tags = provenance_tags("benchmark", small, tmp_path)
    assert tags == {GROUP_TAG: "benchmark", PARAMS_TAG: params_hash(small)}  # not in git, not run by DVC
    assert params_hash(small) == params_hash(parse_params({"benchmark": {"n_per_subtype": 2}}))
    assert params_hash(small) != params_hash(large)
    monkeypatch.setenv("DVC_STAGE", "benchmark")
    assert provenance_tags("benchmark", small, tmp_path)[STAGE_TAG] == "benchmark"


@dg.asset(group_name="g")
def chatty(context: dg.AssetExecutionContext) -> int:
    context.log.info("info line from the asset")
    context.log.debug("debug line from the asset")
    return 1


def test_materialize_group_tags_runs_and_prints_info_not_debug(capfd):
    defs = dg.Definitions(assets=[chatty], executor=dg.in_process_executor)
    with dg.DagsterInstance.ephemeral() as instance:
        [result] = group_runs.materialize_group(defs, "g", instance, tags={GROUP_TAG: "g", PARAMS_TAG: "abc"})
        assert result.success
        [run] = instance.get_runs()
        assert run.tags[GROUP_TAG] == "g" and run.tags[PARAMS_TAG] == "abc" and "clarify/pid" in run.tags
        printed = capfd.readouterr()
        out = printed.out + printed.err
        assert "info line from the asset" in out and "STEP_SUCCESS" not in out
        assert " - DEBUG - " not in out and "debug line from the asset" not in out
        # every event is still in the run's event log (the UI shows them)
        assert any("debug line" in (e.message or "") for e in instance.all_logs(run.run_id))

        group_runs.materialize_group(defs, "g", instance, log_level="debug")
        printed = capfd.readouterr()
        assert "debug line from the asset" in printed.out + printed.err


def test_materialize_command_passes_provenance_and_log_level(tmp_path, monkeypatch):
    seen = {}

    def fake(defs, group, instance, partitions=None, say=None, tags=None, log_level="info", execution=None):
        seen.update(group=group, tags=tags, log_level=log_level)
        return []

    monkeypatch.chdir(REPO)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CLARIFY_PARAMS", "params.yaml")  # the CLI sets both; monkeypatch restores them
    monkeypatch.setattr(group_runs, "materialize_group", fake)
    CliRunner().invoke(cli.app, ["materialize", "no_such_group"])
    assert seen["group"] == "no_such_group" and seen["log_level"] == "info"
    assert seen["tags"][GROUP_TAG] == "no_such_group" and len(seen["tags"][PARAMS_TAG]) == 12
    assert len(seen["tags"][INVOCATION_TAG]) == 32 and float(seen["tags"][INVOCATION_STARTED_TAG]) > 0  # timings
    assert (tmp_path / "home" / "dagster.yaml").read_text() == DAGSTER_YAML
    bad = CliRunner().invoke(cli.app, ["materialize", "no_such_group", "--log-level", "loud"])
    assert bad.exit_code == 2 and "--log-level" in bad.output


@pytest.mark.parametrize("how", ["python", "make"])
def test_new_or_empty_dagster_yaml_turns_telemetry_off_and_a_users_file_is_kept(tmp_path, how):
    def ensure(home: Path) -> Path:
        if how == "python":
            return ensure_dagster_yaml(home)
        subprocess.run(["make", "-s", "-C", str(REPO), "dagster-home", f"DAGSTER_HOME={home}"], check=True,
                       capture_output=True)
        return home / "dagster.yaml"

    new = ensure(tmp_path / "new")
    assert new.read_text() == DAGSTER_YAML
    with dg.DagsterInstance.from_config(str(tmp_path / "new")) as instance:
        assert instance.telemetry_enabled is False
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "dagster.yaml").write_text("\n")
    assert ensure(tmp_path / "empty").read_text() == DAGSTER_YAML
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "dagster.yaml").write_text("run_coordinator: {}\n")
    assert ensure(tmp_path / "user").read_text() == "run_coordinator: {}\n"


def test_rectangles_cover_exactly_the_wanted_multi_partition_keys_in_few_ranges():
    from dagster_project.runs.group_runs import rectangles

    pdef = dg.MultiPartitionsDefinition({"method": dg.StaticPartitionsDefinition(["a", "b", "c", "d"]),
                                         "subject": dg.StaticPartitionsDefinition(["s", "t", "u"])})

    def covered(ranges):
        keys = [str(k) for first, last in ranges
                for k in pdef.get_partition_keys_in_range(dg.PartitionKeyRange(first, last))]
        assert len(keys) == len(set(keys))  # no key in two runs
        return set(keys)

    every = [str(k) for k in pdef.get_partition_keys()]
    assert len(rectangles(pdef, every)) == 1 and covered(rectangles(pdef, every)) == set(every)
    # the demo's shape: one subject with every method, the others with the first method only
    shape = ["a|s", "b|s", "c|s", "d|s", "a|t", "a|u"]
    assert len(rectangles(pdef, shape)) == 2 and covered(rectangles(pdef, shape)) == set(shape)
    holes = ["a|s", "c|s", "b|t", "d|u"]  # nothing to merge: one range per key, never a key not asked for
    assert covered(rectangles(pdef, holes)) == set(holes) and len(rectangles(pdef, holes)) == 4
