"""The suite cleans up after itself (tests/process_guard.py): SIGTERM to `make test` runs pytest's finalisers and
leaves no process behind, and a process a test leaves running fails the session, named, and is killed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest
from process_guard import stop_group

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
CASE = '''
import os, signal, subprocess, sys, time
from pathlib import Path

import pytest

OUT = Path(os.environ["GUARD_CASE_DIR"])
SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]


@pytest.fixture
def server():
    proc = subprocess.Popen(SLEEP, start_new_session=True)
    yield proc
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_waits(server):
    (OUT / "started").write_text(str(server.pid))
    time.sleep(600)


def test_leaks():
    (OUT / "leaked").write_text(str(subprocess.Popen(SLEEP, start_new_session=True).pid))


def test_clean():
    subprocess.run(SLEEP[:2] + ["pass"], check=True)
'''


def case_processes(case: str) -> list[psutil.Process]:
    """Live processes whose environment carries this case's id (everything the child run started)."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.environ().get("GUARD_CASE") == case and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


@pytest.fixture
def case(tmp_path):
    (tmp_path / "test_case.py").write_text(CASE)
    case = uuid.uuid4().hex
    env = {**os.environ, "GUARD_CASE": case, "GUARD_CASE_DIR": str(tmp_path), "PYTHONPATH": str(TESTS)}
    yield tmp_path, case, env
    for proc in case_processes(case):  # whatever a failed assertion left
        with contextlib.suppress(psutil.Error):
            proc.kill()


def _as_from_a_shell() -> None:
    """In the child before exec: SIGINT / SIGTERM at their defaults and unblocked, as a shell or CI runner starts make.
    A disposition the suite's own process holds when it starts make (an ignored SIGINT / SIGTERM is inherited
    through exec, and make keeps an inherited ignore) must not decide what this test sees."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_make_test_stops_pytest_and_what_it_started(case, signum):
    """SIGTERM to make alone (a CI runner, `kill`): make passes it on to pytest. SIGINT to make's whole process
    group (Ctrl-C in a terminal). Either way the finalisers run and nothing the run started is left."""
    folder, tag, env = case
    args = f"-p process_guard -p no:cacheprovider -k test_waits {folder / 'test_case.py'}"
    with open(folder / "make.log", "wb") as log:
        make = subprocess.Popen(["make", "-s", "-o", "install", "-C", str(REPO), "test", f"PYTEST_ARGS={args}"],
                                env=env, start_new_session=True, stdout=log, stderr=subprocess.STDOUT,
                                preexec_fn=_as_from_a_shell)
    try:
        deadline = time.monotonic() + 300  # generous bounds: a loaded 2-core machine starts and stops pytest slowly
        while not (folder / "started").exists():
            assert make.poll() is None and time.monotonic() < deadline, (folder / "make.log").read_text()
            time.sleep(0.2)
        server = int((folder / "started").read_text())
        assert psutil.pid_exists(server) and len(case_processes(tag)) >= 3  # make, pytest, the server
        if signum == signal.SIGTERM:
            make.send_signal(signum)
        else:
            os.killpg(make.pid, signum)
        assert make.wait(timeout=240) != 0
        output = (folder / "make.log").read_text()
        assert "KeyboardInterrupt" in output and ("received SIGTERM" in output) == (signum == signal.SIGTERM)
        assert case_processes(tag) == [], output
    finally:
        stop_group(make)


@pytest.mark.parametrize("test", ["test_leaks", "test_clean"])
def test_a_process_left_running_fails_the_session_and_is_killed(case, test):
    folder, tag, env = case
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "process_guard", "-p", "no:cacheprovider", "-k", test,
                          str(folder / "test_case.py")], cwd=folder, env=env, capture_output=True, text=True,
                         timeout=120)
    if test == "test_clean":
        assert run.returncode == 0, run.stdout
        return
    leaked = int((folder / "leaked").read_text())
    assert run.returncode == pytest.ExitCode.TESTS_FAILED, run.stdout
    assert "1 process(es) started by the tests still running (now killed)" in run.stdout
    assert f"pid {leaked}: {sys.executable} -c import time; time.sleep(600)" in run.stdout
    assert not psutil.pid_exists(leaked) and case_processes(tag) == []
