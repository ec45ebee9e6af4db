"""Progress lines and the tqdm bar share stderr: a line never lands inside a bar line (issue 17 item 8)."""

from __future__ import annotations

import sys

from fakes import ScriptedBackend  # tests/fakes.py, on sys.path via tests/conftest.py
from tqdm import tqdm

import dagster_project.llm.client as client_mod
from dagster_project.config import parse_params
from dagster_project.llm.chat import ChatRequest
from dagster_project.llm.client import LLMClient


class ShownBar(tqdm):
    """The client's bar, drawn even though capsys' stderr is not a terminal."""

    def __init__(self, *args, **kwargs):
        kwargs["disable"] = False
        kwargs["mininterval"] = 0
        super().__init__(*args, **kwargs)


def test_progress_lines_start_on_their_own_line_while_the_bar_is_drawn(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(client_mod, "tqdm", ShownBar)
    config = parse_params({"llm": {"cache_path": str(tmp_path / "llm.sqlite"),
                                   "roles": {"default": {"model": "m"}}}}).llm
    backend = ScriptedBackend(lambda job, idx: "ok")
    client = LLMClient(config, backends={"llamacpp": lambda cfg: backend})
    requests = [ChatRequest.of([{"role": "user", "content": f"q{i}"}]) for i in range(9)]

    client.chat("generator", requests, progress=lambda m: print(m, file=sys.stderr))  # like a log handler

    err = capsys.readouterr().err
    assert "%|" in err, "the bar was not drawn, so the test proves nothing"
    shown = [line.split("\r")[-1] for line in err.split("\n")]  # what a terminal shows on each line
    progress = [line for line in shown if "generated (" in line]
    assert len(progress) == 3  # chunk_size 4: after 4, 8 and 9 requests
    assert all(line.startswith("generator [llamacpp:m]: ") and "%|" not in line for line in progress), progress
