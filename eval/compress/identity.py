"""What a cached compression depends on, as one content address: the compressor's name and config, the
identity of its model (path and a fingerprint of the weights), its code, the ratio and the text. Change
any of them and the cache misses instead of serving a stale compression.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")
_EDGE = 1 << 20


@lru_cache(maxsize=32)
def _file_fingerprint(path: str, size: int, mtime_ns: int) -> str:
    """sha256 over a weights file's size, first and last MiB: changes with any re-save, costs two reads."""
    h = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        h.update(f.read(_EDGE))
        if size > _EDGE:
            f.seek(max(size - _EDGE, _EDGE))
            h.update(f.read(_EDGE))
    return h.hexdigest()


def weights_fingerprint(model: str | None) -> str | None:
    """Fingerprint of a local model folder's (or file's) weights; None for a hub id or no model."""
    if not model:
        return None
    path = Path(model)
    files = [path] if path.is_file() else sorted(p for p in path.glob("*") if p.suffix in WEIGHT_SUFFIXES)
    if not files:
        return None
    h = hashlib.sha256()
    for f in files:
        st = f.stat()
        h.update(f"{f.name}\x1f{_file_fingerprint(str(f), st.st_size, st.st_mtime_ns)}\x1e".encode())
    return h.hexdigest()[:16]


def code_version(*objects: Any) -> str:
    """sha256 of the source files that define `objects` (a compressor's class and its bases)."""
    h = hashlib.sha256()
    for path in sorted({inspect.getsourcefile(o) or "" for o in objects}):
        h.update(Path(path).read_bytes() if path else b"")
    return h.hexdigest()[:16]


def compressor_identity(name: str, config: dict[str, Any], model: str | None, code: str) -> str:
    """The content address of a compressor (without ratio and text, which each key adds)."""
    payload = {"name": name, "config": config, "model": model, "weights": weights_fingerprint(model), "code": code}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:24]
