"""The system's Chromium for the browser tests (Playwright drives it; no browser download). Missing, a browser
test skips, except under CI=true (.ci/run installs Debian's `chromium` package), where it fails."""

from __future__ import annotations

import os
import shutil

import pytest

CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)


def chromium_or_skip() -> str:
    """The Chromium executable; skips the test without one, or fails it when the CI variable is true."""
    if CHROMIUM is not None:
        return CHROMIUM
    why = "no Chromium executable on PATH (`chromium` or `chromium-browser`); Debian/Ubuntu: apt-get install chromium"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{why} (CI=true: a browser test may not skip)")
    pytest.skip(why)
