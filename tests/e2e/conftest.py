from pathlib import Path

import pytest
from project_support import make_project


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A throwaway git + DVC checkout of the project with tiny params (real code, real embedded model)."""
    return make_project(tmp_path)
