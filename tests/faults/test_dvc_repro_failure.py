"""`dvc repro` keeps the last good outputs when a stage fails (bad param) or is killed (kill -9 a few seconds
into the stage): the outs are `persist: true` and the project writes atomically (issue 16 item 2). A real
`dvc repro` on a throwaway project; the "last good" outputs are recorded with `dvc commit`, so no LLM call runs."""

import os
import signal
import subprocess
import time
from pathlib import Path

import polars as pl
import psutil
import yaml

from dagster_project.lib.warehouse import partition_path, prune_stale, rebuild_views, write_parquet_atomic
from tests.project_support import BIN, make_project, run

TAXONOMY = Path("assets/benchmark/taxonomy.parquet")


def env(project: Path) -> dict[str, str]:
    """project_support's environment, plus the project's own copy of the code first on the path."""
    return {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(Path.home()), "DVC_NO_ANALYTICS": "1",
            "GX_ANALYTICS_ENABLED": "false", "HF_HUB_OFFLINE": "1", "DAGSTER_HOME": str(project / ".dagster"),
            "PYTHONPATH": str(project)}


def set_param(project: Path, key: str, value) -> None:
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["benchmark"][key] = value
    (project / "params.yaml").write_text(yaml.safe_dump(params))


def outputs(project: Path) -> dict[str, bytes]:
    return {str(p.relative_to(project)): p.read_bytes() for p in sorted((project / "assets/benchmark").rglob("*"))
            if p.is_file()}


def readable(project: Path) -> list[str]:
    out = subprocess.run([str(BIN / "clarify"), "sql", "--csv", "select label from benchmark.taxonomy order by 1"],
                         cwd=project, env=env(project), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.split()[1:]


def test_failed_and_killed_dvc_repro_keep_the_last_good_outputs(tmp_path, monkeypatch):
    project = make_project(tmp_path)
    monkeypatch.chdir(project)
    write_parquet_atomic(pl.DataFrame({"label": ["lexical", "semantic"]}), TAXONOMY)
    write_parquet_atomic(pl.DataFrame({"n": [1]}), partition_path("assets", "benchmark", "queries_by", "p1"))
    rebuild_views()
    run([str(BIN / "dvc"), "commit", "-f", "-q", "benchmark"], project)  # these are the last good outputs
    good = outputs(project)
    assert len(good) == 2 and readable(project) == ["lexical", "semantic"]

    # 1. a bad param: the CLI refuses it (rc 2) and DVC reports the stage failed
    set_param(project, "n_per_subtype", "many")
    bad = subprocess.run([str(BIN / "dvc"), "repro", "benchmark"], cwd=project, env=env(project),
                         capture_output=True, text=True, timeout=600)
    assert bad.returncode != 0 and "benchmark.n_per_subtype" in bad.stdout + bad.stderr
    assert outputs(project) == good and readable(project) == ["lexical", "semantic"]

    # 2. a valid change (the tiny params hold 2), killed (-9, the whole process group) 3 s after the stage's
    # command started. (With 2 this passed only while DVC counted __pycache__/ as a change of the code deps.)
    set_param(project, "n_per_subtype", 3)
    repro = subprocess.Popen([str(BIN / "dvc"), "repro", "benchmark"], cwd=project, env=env(project),
                             start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not any("materialize" in " ".join(c.cmdline()) for c in psutil.Process(repro.pid).children(True)):
            assert repro.poll() is None and time.monotonic() < deadline, "the stage's command never started"
            time.sleep(0.2)
        time.sleep(3)
    finally:
        os.killpg(repro.pid, signal.SIGKILL)
        repro.wait()
    assert outputs(project) == good and readable(project) == ["lexical", "semantic"]


def test_prune_stale_removes_what_a_complete_run_did_not_write(tmp_path, monkeypatch):
    """With persisted outs, files a finished run no longer produces are deleted by the project, not by DVC."""
    monkeypatch.chdir(tmp_path)
    old_file, old_part = Path("assets/g/renamed.parquet"), partition_path("assets", "g", "parts", "dropped")
    for path in (old_file, old_part):
        write_parquet_atomic(pl.DataFrame({"x": [0]}), path)
    (Path("assets/g/exports")).mkdir()
    Path("assets/g/exports/old.jsonl").write_text("{}\n")
    Path("assets/other").mkdir()
    write_parquet_atomic(pl.DataFrame({"x": [9]}), Path("assets/other/kept.parquet"))  # another group: untouched
    rebuild_views()
    past = time.time() - 60
    for path in Path("assets").rglob("*.*"):
        os.utime(path, (past, past))
    started = time.time() - 1
    kept_file, kept_part = Path("assets/g/table.parquet"), partition_path("assets", "g", "parts", "current")
    for path in (kept_file, kept_part):
        write_parquet_atomic(pl.DataFrame({"x": [1]}), path)
    rebuild_views()

    removed = prune_stale("g", started)
    assert sorted(map(str, removed)) == sorted(map(str, [old_file, old_part, Path("assets/g/exports/old.jsonl")]))
    assert kept_file.exists() and kept_part.exists() and Path("assets/other/kept.parquet").exists()
    assert not Path("assets/g/exports").exists() and not old_part.parent.joinpath("x").exists()
    import duckdb

    with duckdb.connect("assets/warehouse.duckdb", read_only=True) as con:
        views = {f"{s}.{v}" for s, v in con.execute("select schema_name, view_name from duckdb_views() "
                                                      "where not internal").fetchall()}
        assert views == {"g.table", "g.parts", "other.kept"}
        assert con.execute("select sum(x) from g.parts").fetchone() == (1,)
