import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from system_chromium import chromium_or_skip
from project_support import BIN, REPO, make_project


@pytest.fixture
def chromium() -> str:
    """The system's Chromium (tests/e2e/system_chromium.py); request it before a costly fixture so a skip comes first."""
    return chromium_or_skip()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A throwaway git + DVC checkout of the project with tiny params (real code, real embedded model)."""
    return make_project(tmp_path)


def _ui_command(port: int) -> list[str]:
    """`make ui`'s server command as make expands it (`-n`, install not remade), its port swapped for `port`."""
    dry = subprocess.run(["make", "-s", "-n", "-o", "install", "-C", str(REPO), "ui"],
                         capture_output=True, text=True, check=True).stdout
    lines = [line for line in dry.splitlines() if line.startswith("dagster ")]
    assert len(lines) == 1, f"`make ui` should run one dagster command, got:\n{dry}"
    cmd = shlex.split(lines[0])
    assert "-p" in cmd and "127.0.0.1" in cmd, f"`make ui` should serve on 127.0.0.1 at a named port: {cmd}"
    cmd[cmd.index("-p") + 1] = str(port)
    return [str(BIN / cmd[0]), *cmd[1:]]


@dataclass
class UIServer:
    """A running `make ui` server: its base URL and a GraphQL client for what the test compares against."""

    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def gql(self, query: str, variables: dict | None = None) -> dict:
        req = urllib.request.Request(f"{self.url}/graphql", method="POST",
                                     data=json.dumps({"query": query, "variables": variables or {}}).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            body = json.loads(r.read())
        assert "errors" not in body, body
        return body["data"]


@pytest.fixture
def ui_server(project: Path) -> Iterator[UIServer]:
    """`make ui`'s command serving the throwaway project on a free loopback port. Afterwards its whole
    process group is stopped: dagster dev ignores a plain SIGTERM to itself and its children can outlive it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = _ui_command(port)
    (project / ".dagster").mkdir(exist_ok=True)
    (project / ".dagster" / "dagster.yaml").touch()
    env = {**os.environ, "DAGSTER_HOME": str(project / ".dagster"), "PATH": f"{BIN}:{os.environ['PATH']}"}
    proc = subprocess.Popen(cmd, cwd=project, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = UIServer(port)
    try:
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen(f"{server.url}/server_info", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    pytest.fail(f"{' '.join(cmd)} did not come up within 120 s (exit {proc.poll()})")
                time.sleep(1)
        yield server
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
