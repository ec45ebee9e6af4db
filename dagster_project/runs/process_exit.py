"""How a `clarify` command process ends: without the interpreter's teardown when nothing else runs in it."""

from __future__ import annotations

import logging
import multiprocessing
import os
import sys
import threading


def exit_without_teardown(code: object) -> None:
    """Exit with a command's SystemExit code, stdout / stderr / logging flushed, skipping the interpreter's teardown
    (freeing the torch, Great Expectations and Dagster modules: 1.4-1.5 s per command here, 2026-11-28, paid by
    every `dvc repro` stage); an ordinary exit while another thread or a child process still runs, so it can end."""
    if any(not t.daemon for t in threading.enumerate() if t is not threading.main_thread()) \
            or multiprocessing.active_children():
        sys.exit(code)  # the interpreter waits for them, as it would for any command
    logging.shutdown()
    if not isinstance(code, int):  # sys.exit("message") prints the message and exits 1
        if code is not None:
            print(code, file=sys.stderr)
        code = 0 if code is None else 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
