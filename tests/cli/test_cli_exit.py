"""`clarify`'s console entry point: exit codes and output survive the exit that skips the interpreter's teardown,
and a command that leaves a thread running still exits the ordinary way (so that thread can finish)."""

import subprocess
import sys
import threading

import pytest

from dagster_project import cli


class Exited(Exception):
    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


@pytest.fixture
def hard_exit(monkeypatch) -> None:
    def fake_exit(code: int) -> None:
        raise Exited(code)

    monkeypatch.setattr(cli.os, "_exit", fake_exit)


@pytest.mark.parametrize("raised, code", [(SystemExit(0), 0), (SystemExit(3), 3), (SystemExit(None), 0),
                                          (SystemExit("bad params"), 1)])
def test_the_command_exit_code_is_kept(monkeypatch, hard_exit, capsys, raised, code):
    def app() -> None:
        print("partial output")
        raise raised

    monkeypatch.setattr(cli, "app", app)
    with pytest.raises(Exited) as done:
        cli.main()
    assert done.value.code == code
    out = capsys.readouterr()
    assert out.out == "partial output\n"
    assert ("bad params" in out.err) == (raised.code == "bad params")


def test_a_thread_still_running_gets_the_ordinary_exit(monkeypatch, hard_exit):
    release = threading.Event()
    worker = threading.Thread(target=release.wait, daemon=False)

    def app() -> None:
        worker.start()
        raise SystemExit(0)

    monkeypatch.setattr(cli, "app", app)
    try:
        with pytest.raises(SystemExit) as done:  # not Exited: the interpreter will wait for the worker
            cli.main()
        assert done.value.code == 0
    finally:
        release.set()
        worker.join()


def test_an_error_propagates_with_its_traceback(monkeypatch, hard_exit):
    def app() -> None:
        raise ValueError("boom")

    monkeypatch.setattr(cli, "app", app)
    with pytest.raises(ValueError, match="boom"):
        cli.main()


def test_the_console_script_exits_with_the_command_code_and_all_its_output():
    run = [sys.executable, "-c", "from dagster_project.cli import main; main()"]
    ok = subprocess.run([*run, "--help"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "materialize" in ok.stdout and ok.stdout.rstrip().endswith("╯")
    usage = subprocess.run([*run, "materialize"], capture_output=True, text=True, timeout=120)
    assert usage.returncode == 2 and "Missing argument" in usage.stderr
