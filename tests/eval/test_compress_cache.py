"""The compression cache cannot go stale: its key is a content address over everything a compression
depends on, and a change to any one of them is a miss."""

from __future__ import annotations

import inspect
import os
from pathlib import Path

import pytest

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


def test_every_part_of_the_identity_changes_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
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
    # Another machine: an entry's seconds are the cold cost a sample is billed, so its entries are not ours.
    with monkeypatch.context() as m:
        m.setattr("eval.compress.identity.hardware", lambda: {"cpu": "another CPU", "cores": 64, "gpus": []})
        variants["machine"] = compressor_identity("llmlingua", config, str(model), code)
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


def test_weights_fingerprint_reads_every_byte_and_a_missing_hub_id_has_none(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.mkdir()
    blob = bytearray(b"\x00" * (3 << 20))
    (big / "model.safetensors").write_bytes(bytes(blob))
    before = weights_fingerprint(str(big))
    blob[len(blob) // 2] = 1  # a change in the middle, far from both ends
    (big / "model.safetensors").write_bytes(bytes(blob))
    assert weights_fingerprint(str(big)) != before
    assert weights_fingerprint("no-such-org/no-such-model") is None  # no local snapshot to hash


def test_the_key_holds_the_resolved_dtype_and_the_library_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    from eval.compress import COMPRESSORS, CompressorDeps, lingua
    from eval.compress import identity as ident

    def llmlingua_identity() -> str:
        deps = CompressorDeps(count_tokens=len, default_model="m", load_prompt_compressor=lambda *a: object())
        return COMPRESSORS.build(COMPRESSORS.spec("llmlingua"), deps).identity  # type: ignore[attr-defined]

    monkeypatch.setattr(lingua, "auto_cpu_precision", lambda device: "bfloat16")
    on_bf16 = llmlingua_identity()
    assert llmlingua_identity() == on_bf16
    monkeypatch.setattr(lingua, "auto_cpu_precision", lambda device: "float32")
    on_fp32 = llmlingua_identity()
    assert on_fp32 != on_bf16  # "auto" means another dtype on another CPU: another key
    monkeypatch.setattr(ident, "library_versions", lambda: {"llmlingua": "0.2.3", "transformers": "5.19.0"})
    assert llmlingua_identity() != on_fp32


def test_duplicate_keys_from_concurrent_writers_load_the_same_entry_everywhere(tmp_path: Path) -> None:
    import pyarrow as pa

    from eval.compress.cache import Cached, LanceCompressionCache

    cache = LanceCompressionCache(tmp_path)
    rows = {"key": ["k", "k"], "text": ["same", "same"], "seconds": [2.0, 1.0]}
    for order in (slice(None), slice(None, None, -1)):  # written in either order ...
        cache.table.delete("true")
        cache.table.add(pa.table({c: v[order] for c, v in rows.items()}))
        assert LanceCompressionCache(tmp_path).get("k") == Cached("same", 1.0)  # ... read back the same


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


def test_a_compressors_code_version_follows_the_product_helpers_it_imports(tmp_path: Path) -> None:
    from eval.compress.engine import EngineLinguaCompressor
    from eval.compress.identity import ROOT, imported_sources

    (tmp_path / "eval").mkdir()
    (tmp_path / "corpus").mkdir()
    (tmp_path / "eval" / "a.py").write_text("import json\nfrom eval.b import f\n\ndef g():\n    from corpus import c\n")
    (tmp_path / "eval" / "b.py").write_text("import corpus.d\n\ndef f():\n    pass\n")
    (tmp_path / "corpus" / "c.py").write_text("X = 1\n")
    (tmp_path / "corpus" / "d.py").write_text("Y = 2\n")
    (tmp_path / "eval" / "unrelated.py").write_text("Z = 3\n")
    found = imported_sources({tmp_path / "eval" / "a.py"}, tmp_path)
    assert {p.relative_to(tmp_path).as_posix() for p in found} == {
        "eval/a.py",
        "eval/b.py",
        "corpus/c.py",
        "corpus/d.py",
    }
    # engine-lingua scores words through the generator's token_logprobs: an edit there is an edit to it
    source = Path(inspect.getsourcefile(EngineLinguaCompressor) or "").resolve()
    assert ROOT / "eval" / "engine" / "generator.py" in imported_sources({source}, ROOT)


def test_the_index_cache_is_read_on_demand_and_holds_at_most_its_bound(tmp_path: Path) -> None:
    """A sweep or a Ray worker holds the entries it uses, never the whole table: memory does not grow with
    every passage, ratio and compressor the index's cache ever saw."""
    from eval.compress.cache import Cached, LanceCompressionCache

    writer = LanceCompressionCache(tmp_path)
    writer.put_many({f"k{i}": Cached(f"text {i}", float(i)) for i in range(20)})
    assert writer.flush() == 20
    reader = LanceCompressionCache(tmp_path, max_held=5)
    assert len(reader.items) == 0  # nothing read at open
    got = reader.get_many(["k3", "k17", "missing"])
    assert got == {"k3": Cached("text 3", 3.0), "k17": Cached("text 17", 17.0), "missing": None}
    for i in range(20):
        assert reader.get(f"k{i}") == Cached(f"text {i}", float(i))
        assert len(reader.items) <= 5


def test_the_cache_folds_new_rows_into_its_key_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Review 2026-12-06 #9: the key index was built once; rows added later (a precompute adds a whole corpus)
    were scanned by every lookup. Past the fold fraction a flush folds them in."""
    from eval.compress.cache import Cached, LanceCompressionCache

    monkeypatch.setattr(LanceCompressionCache, "INDEXED_FROM", 10)
    cache = LanceCompressionCache(tmp_path / "idx")
    cache.put_many({f"k{i}": Cached(f"t{i}", 0.1) for i in range(20)})
    cache.flush()  # the index is built here (20 rows past 10)
    assert [i.num_unindexed_rows for i in cache.table.list_indices()] == [0]
    cache.put_many({f"n{i}": Cached(f"u{i}", 0.1) for i in range(1)})
    cache.flush()  # 1 of 21 rows uncovered: under the fraction, left for later
    assert [i.num_unindexed_rows for i in cache.table.list_indices()] == [1]
    cache.put_many({f"m{i}": Cached(f"v{i}", 0.1) for i in range(10)})
    cache.flush()  # 11 of 31: folded
    assert [i.num_unindexed_rows for i in cache.table.list_indices()] == [0]
    assert cache.get("m3") == Cached("v3", 0.1) and cache.get("k0") == Cached("t0", 0.1)
