"""The (document id, content hash) pairs an index holds, kept compact for a sync's diff.

A sync asks of every document of the corpus stream whether the index holds it and with which content hash,
then which held documents the stream never named (deleted). At millions of documents a dict of Python strings
costs hundreds of MB; here the ids stay one Arrow column, each id is looked up by an 8-byte key in a sorted
NumPy array (the id itself compared on a key match, so a key collision is never a wrong answer), hashes are
32 bytes each, and "seen" is one bit per held document. Documents the index does not hold yet are the only
ones remembered as Python strings: a sync's memory grows with what changed, not with the index.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from corpus.errors import CribsheetError


def _key(doc_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(doc_id.encode(), digest_size=8).digest(), "little")


class KnownDocs:
    """The documents an index holds: content hash by id, which ones a sync's stream has named, which are gone."""

    def __init__(self, ids: Any = None, hashes: Any = None) -> None:
        """`ids` and `hashes`: Arrow string arrays of equal length (None: an index that holds nothing)."""
        import pyarrow as pa

        self._ids = ids if ids is not None else pa.array([], pa.string())
        n = len(self._ids)
        keys = np.fromiter((_key(i) for i in self._ids.to_pylist()), dtype=np.uint64, count=n)
        self._order = np.argsort(keys, kind="stable")
        self._keys = keys[self._order]
        raw = b"".join(bytes.fromhex(h) for h in (hashes.to_pylist() if hashes is not None else []))
        self._hashes = np.frombuffer(raw, dtype=np.uint8).reshape(n, 32)[self._order]  # rows, not S32: no NUL strip
        self._seen = np.zeros(n, dtype=bool)
        self._new: set[str] = set()

    @classmethod
    def of_table(cls, table: Any) -> KnownDocs:
        """The pairs of the chunk table `table` (its `doc_id` and `doc_hash` columns only)."""
        import pyarrow.compute as pc

        n = table.count_rows()
        if n == 0:
            return cls()
        rows = table.search().select(["doc_id", "doc_hash"]).limit(n).to_arrow()
        pairs = rows.group_by(["doc_id", "doc_hash"]).aggregate([])  # one row per document, not per chunk
        ids = pc.cast(pairs.column("doc_id"), "string").combine_chunks()
        return cls(ids, pc.cast(pairs.column("doc_hash"), "string").combine_chunks())

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
        keys = np.fromiter((_key(d) for d in doc_ids), dtype=np.uint64, count=len(doc_ids))
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
