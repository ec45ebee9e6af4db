import os
import sys
from pathlib import Path

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")
sys.path.insert(0, str(Path(__file__).parent))  # tests/fakes.py importable as `fakes`

# no process outlives the suite: SIGTERM runs the finalisers, and a session-end check fails the run on leftovers
from process_guard import pytest_configure, pytest_sessionfinish  # noqa: E402, F401
