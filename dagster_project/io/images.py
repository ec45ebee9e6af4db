"""Images for multimodal requests: an image reference (URL or local file) as an OpenAI-style content part."""

from __future__ import annotations

import base64
import mimetypes
from pathlib import Path
from typing import Any


def image_part(ref: str, base_dir: str | Path | None) -> dict[str, Any]:
    """An OpenAI-style image content part: URLs pass through, local files become data URLs."""
    if ref.startswith(("http://", "https://", "data:")):
        return {"type": "image_url", "image_url": {"url": ref}}
    path = Path(ref) if Path(ref).is_absolute() or base_dir is None else Path(base_dir) / ref
    if not path.exists():
        raise FileNotFoundError(f"image {ref!r} not found at {path}")
    mime = mimetypes.guess_type(path.name)[0] or "image/png"
    return {"type": "image_url",
            "image_url": {"url": f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}"}}
