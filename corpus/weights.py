"""Weights fingerprints: what a model *is*, not what it is called. A folder saved again under the same name,
or a hub id whose local snapshot moved, gets another fingerprint, and every identity that names the model
(an index's build spec, a run's fingerprint and reuse key, a compression-cache key) changes with it.

Each weights file's sha256 is cached by (path, size, mtime, ctime) in memory and in a small JSON file
(`$CRIBSHEET_CACHE`, default `~/.cache/cribsheet`), so a sweep does not re-hash gigabytes; a file
written again gets a new ctime (even a copy that keeps its mtime), and so is hashed again.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from corpus import digests

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".onnx")
SHAPING_SUFFIXES = (".json", ".txt", ".model", ".jinja", ".tiktoken", ".py")
"""Besides the weights, the files that shape a model's outputs: tokenizer (`tokenizer.json`, `vocab.txt`,
`merges.txt`, sentencepiece `.model`), its config and chat template (`tokenizer_config.json`,
`chat_template.jinja`), `config.json`, `generation_config.json`, sentence-transformers' modules, pooling
and `max_seq_length` (`modules.json`, `1_Pooling/config.json`, `sentence_bert_config.json`), and the
modelling code a `trust_remote_code` model runs (`modeling_*.py`, `configuration_*.py`, `tokenization_*.py`,
a sentence-transformers custom module)."""
IGNORED_NAMES = (
    "card.json",
    "trainer_state.json",
    "training_args",
    "optimizer",
    "scheduler",
    "rng_state",
    "scaler",
    "README",
    "LICENSE",
    "NOTICE",
)
"""Files of a model folder that describe it or a trainer's state without shaping its outputs (names, or their
stems): `training_args.bin` is written again by every training run, with other output paths or seeds, whatever
the weights; a trainer's optimizer, scheduler, RNG and loss-scaler states resume training, never inference."""
IGNORED_DIRS = (".git", ".cache", "runs")
"""Folders of a model folder left out; `checkpoint-*` folders (a trainer's resumable state) too."""
_MEMORY: dict[str, str] = {}


def _cache_file() -> Path:
    return Path(os.environ.get("CRIBSHEET_CACHE") or Path.home() / ".cache" / "cribsheet") / "weights-sha256.json"


def _load_cache() -> dict[str, str]:
    try:
        data = json.loads(_cache_file().read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _save_cache(entries: dict[str, str]) -> None:
    """Merge `entries` into the cache file with an atomic replace (a lost race only costs a re-hash)."""
    target = _cache_file()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        merged = _load_cache() | entries
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".weights-")
        with os.fdopen(fd, "w") as f:
            json.dump(merged, f)
        os.replace(tmp, target)
    except OSError:  # a read-only home: the in-memory cache still holds
        pass


def file_sha256(path: Path) -> str:
    """sha256 of a whole weights file (`corpus.digests.file_sha256`), computed once per (path, size, mtime,
    ctime).
    """
    st = path.stat()
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}"  # ctime: a copy that kept its mtime
    if key in _MEMORY:
        return _MEMORY[key]
    stored = _load_cache().get(key)
    if stored is None:
        stored = digests.file_sha256(path)
        _save_cache({key: stored})
    _MEMORY[key] = stored
    return stored


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
    except (OSError, ValueError):  # not in the local cache (LocalEntryNotFoundError), or no hub id (HFValidationError)
        return None


def _shapes_outputs(relative: Path) -> bool:
    """Whether a file of a model folder shapes the model's outputs: its weights, tokenizer, configs,
    template and modelling code (`WEIGHT_SUFFIXES`, `SHAPING_SUFFIXES`), not its card, licence, or a trainer's
    arguments, state and checkpoints.
    """
    if any(part in IGNORED_DIRS or part.startswith("checkpoint-") for part in relative.parts[:-1]):
        return False
    if relative.name in IGNORED_NAMES or relative.stem in IGNORED_NAMES:
        return False
    return relative.suffix in WEIGHT_SUFFIXES or relative.suffix in SHAPING_SUFFIXES


def weights_fingerprint(model: str | Path | None) -> str | None:
    """sha256 over every file of a model folder (or file) that shapes its outputs: weights, tokenizer,
    configs, chat template, sentence-transformers pooling and sequence length (`_shapes_outputs`), a hub id
    through its local snapshot (sub-folders included: a sentence-transformers module keeps files in one);
    None when there is no model, no local copy or no weights file.
    """
    if not model:
        return None
    path = local_model(str(model))
    if path is None:
        return None
    if path.is_file():
        files = [path]
    else:
        files = sorted(p for p in path.rglob("*") if p.is_file() and _shapes_outputs(p.relative_to(path)))
    if not any(f.suffix in WEIGHT_SUFFIXES for f in files):
        return None
    h = hashlib.sha256()
    for f in files:
        name = f.name if path.is_file() else f.relative_to(path).as_posix()
        h.update(f"{name}\x1f{file_sha256(f)}\x1e".encode())
    return h.hexdigest()[:16]
