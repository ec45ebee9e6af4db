"""Pytest plugin (loaded by tests/conftest.py; `-p process_guard` elsewhere): the suite leaves no process behind.

- SIGTERM becomes a KeyboardInterrupt, as Ctrl-C does, so pytest runs every fixture finaliser (which stop the servers
  and subprocesses the tests started) before it exits, instead of dying at once and orphaning them.
- Every process the suite starts inherits CLARIFY_TEST_SESSION=<token of this session>. At the end of the session,
  after the finalisers, any such process still alive GRACE_S later (a descendant of pytest, or an orphan adopted by
  init, which keeps the token in its environment) fails the run, named by pid and command line, and is then killed.
- `stop_group` is the one way tests stop what they start in a process group of its own.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import uuid

import psutil
import pytest

TOKEN_ENV = "CLARIFY_TEST_SESSION"
# not leftovers: helpers of Python's process pools, which exit with pytest (they watch a pipe to it), and DVC's
# detached update / analytics checks (`dvc daemon ...`), which exit on their own
HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver", "loky.backend.resource_tracker",
           "dvc daemon")
GRACE_S = 5.0  # a process already on its way out (a pool worker told to stop) gets this long before it counts
_token = pytest.StashKey[str]()


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"received {signal.Signals(signum).name}")


def pytest_configure(config: pytest.Config) -> None:
    # a fresh token per session: a pytest started by a test tracks its own children, not its parent's
    os.environ[TOKEN_ENV] = config.stash[_token] = uuid.uuid4().hex
    signal.signal(signal.SIGTERM, _interrupt)


def _cmdline(proc: psutil.Process) -> str:
    with contextlib.suppress(psutil.Error):
        return " ".join(proc.cmdline()) or proc.name()
    return "?"


def leftovers(token: str) -> list[psutil.Process]:
    """Live processes started by this session: pytest's descendants and any process carrying the session token,
    less pool helpers (HELPERS) and zombies (dead, waiting to be reaped)."""
    me = psutil.Process()
    found = {p.pid: p for p in me.children(recursive=True)}
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.pid != me.pid and proc.environ().get(TOKEN_ENV) == token:
                found[proc.pid] = proc
    alive = []
    for proc in found.values():
        with contextlib.suppress(psutil.Error):
            if proc.status() != psutil.STATUS_ZOMBIE and not any(h in _cmdline(proc) for h in HELPERS):
                alive.append(proc)
    return sorted(alive, key=lambda p: p.pid)


def stop_group(proc: subprocess.Popen | int, grace_s: float = 10.0) -> None:
    """SIGTERM to the process group led by ``proc`` (started with start_new_session=True), SIGKILL to whatever is
    left of it after ``grace_s``; reaps ``proc`` when it is our child."""
    pid = proc if isinstance(proc, int) else proc.pid
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    if isinstance(proc, subprocess.Popen):
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
    else:
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).wait(timeout=grace_s)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    if isinstance(proc, subprocess.Popen):
        proc.wait()


def _kill(procs: list[psutil.Process]) -> None:
    """SIGKILL each process, and its process group when that is not pytest's own."""
    own = os.getpgrp()
    for proc in procs:
        with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
            pgid = os.getpgid(proc.pid)
            if pgid != own:
                os.killpg(pgid, signal.SIGKILL)
            proc.kill()
    psutil.wait_procs(procs, timeout=10)


@pytest.hookimpl(trylast=True)  # after pytest's own sessionfinish, which runs the pending fixture finalisers
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _gone, left = psutil.wait_procs(leftovers(session.config.stash[_token]), timeout=GRACE_S)
    if not left:
        return
    lines = [f"pid {p.pid}: {_cmdline(p)[:300]}" for p in left]
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_sep("=", f"{len(left)} process(es) started by the tests still running (now killed)", red=True)
        for line in lines:
            reporter.write_line(line)
    _kill(left)
    if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
