"""Process-wide defaults for a quiet, offline run of the backends; anything the user set wins.

Call before the backends are imported: LanceDB reads its log level once, when its extension loads.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

QUIET_OFFLINE_DEFAULTS: dict[str, str] = {
    # LanceDB logs a deprecation note per hybrid query (its sub-queries omit `_distance`/`_score`, which
    # a hybrid query cannot select); `LANCE_LOG` covers the lance format library underneath.
    "LANCEDB_LOG": "error",
    "LANCE_LOG": "error",
    "VLLM_LOGGING_LEVEL": "WARNING",
    # vLLM's engine otherwise applies a logging dictConfig when it starts, which flushes and closes every
    # handler of the process while holding logging's lock: inside a Prefect flow run, whose API log handler
    # flushes through a thread that needs that lock, the sweep hung there for good (seen in `cribsheet
    # demo` with its output to a file). vLLM's warnings still reach the log through the root logger.
    "VLLM_CONFIGURE_LOGGING": "0",
    "TRANSFORMERS_VERBOSITY": "error",
    # No model hub on the machines we serve first: every model comes from a package.
    "HF_HUB_OFFLINE": "1",
    # Our own progress bars cover the long stages; model-loading bars would bury them (and error lines).
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def installed_versions(names: Iterable[str]) -> dict[str, str]:
    """Installed versions of the distributions `names` (absent ones are left out)."""
    out: dict[str, str] = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def quiet_offline_env() -> None:
    """Set every `QUIET_OFFLINE_DEFAULTS` entry the environment does not already have."""
    for key, value in QUIET_OFFLINE_DEFAULTS.items():
        if key == "VLLM_CONFIGURE_LOGGING" and "VLLM_LOGGING_CONFIG_PATH" in os.environ:
            continue  # the user's own logging config file needs vLLM's logging setup on
        os.environ.setdefault(key, value)


def release_memory() -> None:
    """Hand freed heap pages back to the OS (glibc `malloc_trim`): embedding batches of varying shapes
    otherwise fragment the heap and a long indexing run's resident memory creeps up. No-op elsewhere.
    """
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if name is None:
        return
    try:
        ctypes.CDLL(name).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        return


CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "neon", "asimd")
"""Instruction-set flags that change kernels (and bf16 numerics) under torch and vLLM."""


@lru_cache(maxsize=1)
def hardware() -> dict[str, object]:
    """The machine running this (what a run's timings were measured on): CPU model and relevant flags, cores,
    GPU names (nvidia-smi, when there). Read once per process.
    """
    import shutil
    import subprocess

    model, flags = "unknown", set[str]()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model") and model == "unknown":
                model = value.strip()
            elif key.strip() in ("flags", "Features") and not flags:
                flags = set(value.split())
    except OSError:
        pass
    gpus: list[str] = []
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout
            gpus = [g.strip() for g in out.splitlines() if g.strip()]
        except (OSError, subprocess.SubprocessError):
            gpus = []
    return {
        "cpu": model,
        "cpu_flags": sorted(f for f in CPU_FLAGS if f in flags),
        "cores": os.cpu_count(),
        "gpus": gpus,
    }


def hardware_text(raw: str | None) -> str:
    """A stored `hardware()` record (its JSON, as in `runs.hardware_json`) as people read it: CPU model,
    cores and GPUs; "hardware not recorded" for a run that stored none.
    """
    import json

    if not raw:
        return "hardware not recorded"
    hw = json.loads(raw)
    gpus = hw.get("gpus") or []
    return f"{hw.get('cpu', 'unknown CPU')}, {hw.get('cores', '?')} cores" + (f", {', '.join(gpus)}" if gpus else "")
