"""Process-wide defaults for a quiet, offline run of the backends; anything the user set wins.

Call before the backends are imported: LanceDB reads its log level once, when its extension loads.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Iterable

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
