"""The compression cache cannot go stale: its key is a content address over everything a compression
depends on, and a change to any one of them is a miss."""

from __future__ import annotations

import os
from pathlib import Path

from eval.compress.cache import MemoryCache, cache_key
from eval.compress.identity import code_version, compressor_identity, weights_fingerprint
from eval.compress.lingua import LLMLinguaConfig
from tests.fakes import HalvingCompressor


def _model(tmp_path: Path, payload: bytes = b"\x01" * 4096) -> Path:
    folder = tmp_path / "lm"
    folder.mkdir(exist_ok=True)
    (folder / "model.safetensors").write_bytes(payload)
    (folder / "config.json").write_text("{}")
    return folder


def test_every_part_of_the_identity_changes_the_key(tmp_path: Path) -> None:
    model = _model(tmp_path)
    config = LLMLinguaConfig(model=str(model)).model_dump()
    code = code_version(HalvingCompressor)
    base = compressor_identity("llmlingua", config, str(model), code)
    key = cache_key(base, 4.0, "passage")
    variants = {
        "name": compressor_identity("engine-lingua", config, str(model), code),
        "dtype": compressor_identity("llmlingua", config | {"dtype": "float32"}, str(model), code),
        "window": compressor_identity("llmlingua", config | {"agnostic_window": 32}, str(model), code),
        "model path": compressor_identity("llmlingua", config, str(tmp_path / "other"), code),
        "code version": compressor_identity("llmlingua", config, str(model), code_version(MemoryCache)),
    }
    (model / "model.safetensors").write_bytes(b"\x02" * 4096)  # re-trained weights, same size and path
    os.utime(model / "model.safetensors", ns=(1, 1))
    variants["weights"] = compressor_identity("llmlingua", config, str(model), code)
    keys = {what: cache_key(identity, 4.0, "passage") for what, identity in variants.items()}
    keys["ratio"] = cache_key(base, 3.0, "passage")
    keys["text"] = cache_key(base, 4.0, "passage.")
    assert all(k != key for k in keys.values()), [w for w, k in keys.items() if k == key]
    assert len(set(keys.values())) == len(keys)
    # And nothing else: the same inputs give the same key in every process.
    assert compressor_identity("llmlingua", dict(config), str(_model(tmp_path, b"\x02" * 4096)), code) != base
    assert cache_key(base, 4.0, "passage") == key


def test_weights_fingerprint_reads_only_the_edges_of_large_files(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.mkdir()
    blob = bytearray(b"\x00" * (3 << 20))
    (big / "model.safetensors").write_bytes(bytes(blob))
    before = weights_fingerprint(str(big))
    blob[-10] = 1  # a change in the last MiB
    (big / "model.safetensors").write_bytes(bytes(blob))
    assert weights_fingerprint(str(big)) != before
    assert weights_fingerprint("HuggingFaceTB/SmolLM2-135M-Instruct") is None  # a hub id: path identity only


def test_a_changed_compressor_misses_the_shared_cache() -> None:
    cache = MemoryCache()
    old = HalvingCompressor(cache=cache)
    old.identity = "halving/window=16"
    old.compress(["one two three four"], "q", 2.0)
    same = HalvingCompressor(cache=cache)
    same.identity = "halving/window=16"
    assert same.compress(["one two three four"], "q", 2.0).calls == 0
    changed = HalvingCompressor(cache=cache)
    changed.identity = "halving/window=32"
    assert changed.compress(["one two three four"], "q", 2.0).calls == 1
