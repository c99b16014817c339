"""The (document id, content hash) pairs an index holds, kept compact for a sync's diff.

A sync asks of every document of the corpus stream whether the index holds it and with which content hash,
then which held documents the stream never named (deleted). At millions of documents a dict of Python strings
costs hundreds of MB; here the ids stay one Arrow column, each id is looked up by an 8-byte key in a sorted
NumPy array (the id itself compared on a key match, so a key collision is never a wrong answer), hashes are
32 bytes each, and "seen" is one bit per held document. Documents the index does not hold yet are the only
ones remembered as Python strings: a sync's memory grows with what changed, not with the index.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from corpus.errors import CribsheetError

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_HEX = np.full(256, 255, dtype=np.uint8)
_HEX[np.frombuffer(b"0123456789abcdef", dtype=np.uint8)] = np.arange(16, dtype=np.uint8)
_HEX[np.frombuffer(b"ABCDEF", dtype=np.uint8)] = np.arange(10, 16, dtype=np.uint8)


def _buffers(strings: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, lengths, bytes) of an Arrow string array, read from its buffers: no Python string per value."""
    import pyarrow as pa

    arr = pa.array(strings, type=pa.string()) if isinstance(strings, list) else strings
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    width = np.int64 if pa.types.is_large_string(arr.type) else np.int32
    _, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=width)[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, dtype=np.uint8)
    return offsets[:-1], np.diff(offsets), data


def _keys(strings: Any) -> np.ndarray:
    """A 64-bit FNV-1a key of each string (of an Arrow string array or a list), computed column by column of
    the bytes in NumPy: a million ids cost milliseconds and no Python objects. Used only to look ids up within
    one process, so its stability across versions does not matter; equal keys are resolved by the id itself.
    """
    starts, lengths, data = _buffers(strings)
    keys = np.full(len(starts), _FNV_OFFSET, dtype=np.uint64)
    live = np.arange(len(starts))
    for j in range(int(lengths.max()) if len(lengths) else 0):
        live = live[lengths[live] > j]
        keys[live] = (keys[live] ^ data[starts[live] + j].astype(np.uint64)) * _FNV_PRIME
    return keys


def _digests(hashes: Any) -> np.ndarray:
    """The hex content hashes of an Arrow string array as 32-byte rows, decoded in NumPy."""
    starts, lengths, data = _buffers(hashes)
    if not len(starts):
        return np.zeros((0, 32), dtype=np.uint8)
    if not (lengths == 64).all():
        raise CribsheetError("the index holds a document hash that is not a 64-digit sha256; rebuild it (--rebuild)")
    first = int(starts[0])
    contiguous = bool((starts == first + 64 * np.arange(len(starts))).all())  # the usual layout: one run of digits
    digests = np.empty((len(starts), 32), dtype=np.uint8)
    for lo in range(0, len(starts), 65536):  # in blocks: the hex digits of a million hashes are 64 MB
        hi = min(lo + 65536, len(starts))
        if contiguous:
            chars = data[first + 64 * lo : first + 64 * hi].reshape(hi - lo, 64)
        else:
            chars = np.stack([data[a : a + 64] for a in starts[lo:hi].tolist()])
        nibbles = _HEX[chars]
        if (nibbles == 255).any():
            raise CribsheetError("the index holds a document hash that is not hexadecimal; rebuild it (--rebuild)")
        digests[lo:hi] = (nibbles[:, 0::2] << 4) | nibbles[:, 1::2]
    return digests


def _key(doc_id: str) -> int:
    return int(_keys([doc_id])[0])


class KnownDocs:
    """The documents an index holds: content hash by id, which ones a sync's stream has named, which are gone."""

    def __init__(self, ids: Any = None, hashes: Any = None) -> None:
        """`ids` and `hashes`: Arrow string arrays of equal length (None: an index that holds nothing)."""
        import pyarrow as pa

        self._ids = ids if ids is not None else pa.array([], pa.string())
        n = len(self._ids)
        keys = _keys(self._ids)
        self._order = np.argsort(keys, kind="stable")
        self._keys = keys[self._order]
        raw = _digests(hashes) if hashes is not None else np.zeros((0, 32), dtype=np.uint8)
        self._hashes = raw[self._order]
        self._seen = np.zeros(n, dtype=bool)
        self._new: set[str] = set()

    @classmethod
    def of_table(cls, table: Any) -> KnownDocs:
        """The pairs of the chunk table `table` (its `doc_id` and `doc_hash` columns of each chunk 0 only)."""
        n = table.count_rows()
        if n == 0:
            return cls()
        # one row per document, its chunk 0 (the writer numbers every document's chunks from 0)
        rows = table.search().where("position = 0").select(["doc_id", "doc_hash"]).limit(n).to_arrow()
        return cls(rows.column("doc_id").combine_chunks(), rows.column("doc_hash").combine_chunks())

    def __len__(self) -> int:
        return len(self._keys)

    def _find(self, doc_id: str) -> int | None:
        """Position of `doc_id` in the sorted arrays, or None."""
        key = np.uint64(_key(doc_id))
        pos = int(np.searchsorted(self._keys, key))
        while pos < len(self._keys) and self._keys[pos] == key:
            if self._ids[int(self._order[pos])].as_py() == doc_id:
                return pos
            pos += 1
        return None

    def hash_of(self, doc_id: str) -> str | None:
        """The content hash the index holds for `doc_id` (None: not held)."""
        pos = self._find(doc_id)
        return None if pos is None else self._hashes[pos].tobytes().hex()

    def __contains__(self, doc_id: object) -> bool:
        return isinstance(doc_id, str) and self._find(doc_id) is not None

    def see(self, doc_id: str) -> str | None:
        """Mark `doc_id` named by the stream and return its held hash (None: new); a second naming is refused."""
        pos = self._find(doc_id)
        if pos is None:
            if doc_id in self._new:
                raise CribsheetError(f"duplicate document id '{doc_id}' in the corpus stream")
            self._new.add(doc_id)
            return None
        if self._seen[pos]:
            raise CribsheetError(f"duplicate document id '{doc_id}' in the corpus stream")
        self._seen[pos] = True
        return str(self._hashes[pos].tobytes().hex())

    def see_many(self, doc_ids: list[str]) -> list[str | None]:
        """`see` for a block of ids at once (one vectorised lookup: what keeps a sync's scan of a corpus of
        millions of documents cheap), in order; a repeated id is refused as `see` refuses it.
        """
        import pyarrow as pa

        if len(doc_ids) != len(set(doc_ids)):
            twice = next(d for i, d in enumerate(doc_ids) if d in doc_ids[:i])
            raise CribsheetError(f"duplicate document id '{twice}' in the corpus stream")
        if not len(self._keys):
            return [self.see(d) for d in doc_ids]
        keys = _keys(doc_ids)
        pos = np.minimum(np.searchsorted(self._keys, keys), len(self._keys) - 1)
        candidate = np.flatnonzero(self._keys[pos] == keys)
        held = self._ids.take(pa.array(self._order[pos[candidate]], type=pa.int64())).to_pylist()
        found: dict[int, int] = {int(i): int(pos[i]) for i, d in zip(candidate, held, strict=True) if d == doc_ids[i]}
        out: list[str | None] = []
        for i, doc_id in enumerate(doc_ids):
            if i not in found:  # new, or a key another id shares: the one-by-one path decides
                out.append(self.see(doc_id))
                continue
            p = found[i]
            if self._seen[p]:
                raise CribsheetError(f"duplicate document id '{doc_id}' in the corpus stream")
            self._seen[p] = True
            out.append(self._hashes[p].tobytes().hex())
        return out

    @property
    def n_seen(self) -> int:
        """Documents the stream named so far."""
        return int(self._seen.sum()) + len(self._new)

    def gone(self) -> list[str]:
        """Held documents the stream never named (deleted from the corpus), sorted."""
        import pyarrow as pa

        rows = self._order[~self._seen]
        return sorted(self._ids.take(pa.array(rows, type=pa.int64())).to_pylist()) if len(rows) else []
