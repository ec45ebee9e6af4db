"""Who answers a role, for the cache key: backend + model + endpoint (URL) or model-file fingerprint.

A reply is served from the cache only to the same backend and model at the same endpoint (openai: the
base URL, or all URLs of a pool (base_urls), one endpoint; llamacpp and vLLM from a local path: a fingerprint of the
weights, for llamacpp with the backend's revision; transformers, and vLLM serving a trained model: the weights and
every LoRA adapter applied to them; with the `dtype` their engine_kwargs name), so a different server, model file,
precision or retrained adapter never receives another's replies. Roles that set the same `cache_namespace` share
replies deliberately (e.g. one vLLM model behind two URLs). Never includes the API key or timeouts.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from dagster_project.config import RoleConfig
from dagster_project.llm.trained import TRAINING_PREFIX, TrainedModelMissing, served_model

KEY_VERSION = 2  # 1: (backend, model) only, before the endpoint entered the key
# llamacpp replies before revision 2 drew a job's samples after the first from the previous reply's logits
# (kv_prefix.PrefixReuseLlama.remember): their cached replies are not served to the fixed backend
LLAMACPP_REVISION = "2"
_SAMPLE_BYTES = 1 << 20  # hashed from each end of a weights file


def cache_identity(cfg: RoleConfig) -> dict[str, str]:
    """The model identity that enters every cache key of this role (see module docstring)."""
    if cfg.cache_namespace:
        return {"model": cfg.model, "namespace": cfg.cache_namespace}
    ident = {"backend": cfg.backend, "model": cfg.model}
    if cfg.backend in ("transformers", "vllm") and "dtype" in cfg.engine_kwargs:  # other numbers, other replies
        ident["dtype"] = str(cfg.engine_kwargs["dtype"])  # (absent: the default, keys as before)
    if cfg.backend == "openai":
        return ident | {"endpoint": " ".join(sorted({normalize_url(u) for u in cfg.endpoints}))}
    if cfg.backend == "llamacpp" and cfg.model.startswith(TRAINING_PREFIX):  # its GGUF base + adapters (lora_gguf.py)
        return ident | {"model_file": served_fingerprint(cfg.model, merged=False), "quantize": str(cfg.quantize),
                        "revision": LLAMACPP_REVISION}
    if cfg.backend == "llamacpp":
        return ident | {"model_file": _gguf_fingerprint(cfg.model, cfg.quantize), "revision": LLAMACPP_REVISION}
    if cfg.backend == "transformers" or cfg.model.startswith(TRAINING_PREFIX):  # vllm serves trained models too
        return ident | {"model_file": served_fingerprint(cfg.model)}
    local = Path(cfg.model).expanduser()
    return ident | {"model_file": fingerprint(local)} if local.exists() else ident


def normalize_url(url: str) -> str:
    """Scheme and host lower-cased, user info, query and trailing slash dropped: one endpoint, one spelling."""
    parts = urlsplit(url.strip())
    host = (parts.hostname or "").lower()
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme.lower(), netloc, parts.path.rstrip("/"), "", ""))


def served_fingerprint(model: str, merged: bool = True) -> str:
    """The transformers backend's weights (a folder, a GGUF it converts, or a trained model's base) and adapters;
    "missing" when a trained model is not built yet (the backend fails those rows)."""
    try:
        served = served_model(model, merged=merged)
    except (TrainedModelMissing, ValueError):
        return "missing"
    parts = [_weights_fingerprint(served.weights, served.base_fingerprint), *map(fingerprint, served.adapters)]
    return parts[0] if len(parts) == 1 else hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


def _weights_fingerprint(spec: str, recorded: str | None) -> str:
    """A local folder or file by content, a GGUF alias by its file, a hub id by the fingerprint training recorded."""
    from dagster_project.llm.backends.llamacpp import KNOWN_GGUF

    if Path(spec).expanduser().exists():
        return fingerprint(Path(spec).expanduser())
    if spec in KNOWN_GGUF or spec.endswith(".gguf"):
        return _gguf_fingerprint(spec)
    return recorded or f"hub:{spec}"


def _gguf_fingerprint(model: str, quantize: str | None = None) -> str:
    try:
        return fingerprint(_gguf_path(model, quantize))
    except (OSError, RuntimeError):  # FileNotFoundError included; RuntimeError: llama.cpp could not re-encode it
        return "missing"  # the backend will fail these rows; a later real file gets its own keys


@lru_cache(maxsize=32)
def _gguf_path(model: str, quantize: str | None = None) -> Path:
    """The file a llamacpp role runs, resolved once per process; a failure is not remembered."""
    from dagster_project.llm.backends.llamacpp import gguf_to_load

    return gguf_to_load(model, quantize)


def fingerprint(path: Path) -> str:
    """Content fingerprint of a weights file or folder: size + sha256 of its first and last MiB per file.

    Computed once per process per (path, size, mtime), so a run pays a few MiB of reads, not the whole file."""
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    h = hashlib.sha256()
    for f in files:
        st = f.stat()
        h.update(f"{f.relative_to(path) if path.is_dir() else ''}:{_file_digest(f.resolve(), st.st_size, st.st_mtime_ns)}"
                 .encode())
    return h.hexdigest()[:32]


@lru_cache(maxsize=256)
def _file_digest(path: Path, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256(str(size).encode())
    with path.open("rb") as fh:
        h.update(fh.read(_SAMPLE_BYTES))
        if size > _SAMPLE_BYTES:
            fh.seek(max(size - _SAMPLE_BYTES, _SAMPLE_BYTES))
            h.update(fh.read(_SAMPLE_BYTES))
    return h.hexdigest()
