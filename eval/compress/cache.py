"""Query-agnostic compressions, computed once per content address and reused forever, each kept with what
computing it cost (its cold cost), so a request served from the cache can still report the whole bill.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

TABLE = "compressions_v2"
"""v2: keys are content addresses over the compressor's identity; entries carry their cold cost."""


class Cached(NamedTuple):
    """One cached compression."""

    text: str
    seconds: float
    """What computing it cost when it was computed (its share of the batch it was computed in)."""


def cache_key(identity: str, ratio: float, text: str) -> str:
    """Content key over the compressor's identity (`eval.compress.identity`), the ratio and the text: the same
    passage compressed the same way is the same entry in every run, and nothing else is.
    """
    return hashlib.sha256(f"{identity}\x1f{ratio:g}\x1f{text}".encode()).hexdigest()


class CompressionCache(Protocol):
    """Maps cache keys to compressed passages."""

    def get(self, key: str) -> Cached | None:
        """The cached entry of `key`, or None."""
        ...

    def get_many(self, keys: Sequence[str]) -> dict[str, Cached | None]:
        """The entries of `keys` (None where absent), in one read."""
        ...

    def put_many(self, items: Mapping[str, Cached]) -> None:
        """Add entries."""
        ...

    def flush(self) -> int:
        """Persist entries added since the last flush; returns how many."""
        ...


class MemoryCache:
    """A dict: one process, gone at exit."""

    def __init__(self) -> None:
        self.items: dict[str, Cached] = {}

    def get(self, key: str) -> Cached | None:
        """The cached entry of `key`, or None."""
        return self.items.get(key)

    def get_many(self, keys: Sequence[str]) -> dict[str, Cached | None]:
        """The entries of `keys` (None where absent)."""
        return {k: self.items.get(k) for k in keys}

    def put_many(self, items: Mapping[str, Cached]) -> None:
        """Add entries."""
        self.items.update(items)

    def flush(self) -> int:
        """Nothing to persist."""
        return 0


class LanceCompressionCache:
    """A `compressions_v2` table next to the chunks in the index's LanceDB folder, read on demand.

    A lookup reads only the keys it asks for (a filtered scan of the key column, with a scalar index once the
    table is large) and keeps at most `max_held` entries in memory (least recently used first out), so a sweep
    or a Ray worker holds what it uses, never the whole cache. New entries are written with one merge on the
    key per `flush`, so a reader never sees half a batch; entries are keyed by content, so concurrent writers
    write the same entry, and where both inserted it every reader picks the same copy (the lowest text, then
    seconds: lance-format/lance#4585).
    """

    INDEXED_FROM = 10_000
    """Rows from which a scalar index on the key is built (once), so a lookup does not scan the whole table."""

    def __init__(self, index_path: Path, max_held: int = 50_000) -> None:
        import lancedb
        import pyarrow as pa

        self._schema = pa.schema(
            [pa.field("key", pa.string()), pa.field("text", pa.string()), pa.field("seconds", pa.float64())]
        )
        db = lancedb.connect(str(index_path))
        try:
            self.table: Any = db.open_table(TABLE)
        except (ValueError, FileNotFoundError):
            self.table = db.create_table(TABLE, schema=self._schema, exist_ok=True)
        self.max_held = max_held
        self.items: OrderedDict[str, Cached | None] = OrderedDict()
        """Entries read or written here, most recently used last (None: looked up, not in the table)."""
        self.pending: dict[str, Cached] = {}
        self._indexed = False

    def _read(self, keys: Sequence[str]) -> dict[str, Cached]:
        """The stored entries of `keys` (one filtered read)."""
        if not keys or not self.table.count_rows():
            return {}
        self._index_once()
        quoted = ", ".join("'" + k.replace("'", "''") + "'" for k in keys)
        rows = self.table.search().where(f"key IN ({quoted})").select(["key", "text", "seconds"])
        table = rows.limit(max(1, self.table.count_rows())).to_arrow()
        found: dict[str, Cached] = {}
        for key, text, seconds in sorted(
            zip(
                table.column("key").to_pylist(),
                table.column("text").to_pylist(),
                table.column("seconds").to_pylist(),
                strict=True,
            ),
            reverse=True,
        ):
            found[key] = Cached(text, seconds)  # the last written wins: the lowest (text, seconds)
        return found

    def _index_once(self) -> None:
        if self._indexed or self.table.count_rows() < self.INDEXED_FROM:
            return
        self._indexed = True
        if not any("key" in getattr(i, "columns", []) for i in self.table.list_indices()):
            self.table.create_scalar_index("key")

    def _hold(self, key: str, entry: Cached | None) -> None:
        self.items[key] = entry
        self.items.move_to_end(key)
        while len(self.items) > self.max_held:
            old, _ = self.items.popitem(last=False)
            if old in self.pending:  # written at the next flush: keep it in memory until then
                self.items[old] = self.pending[old]
                break

    def get_many(self, keys: Sequence[str]) -> dict[str, Cached | None]:
        """The entries of `keys` (None where absent), reading from the table only the ones not held."""
        wanted = [k for k in dict.fromkeys(keys) if k not in self.items]
        read = self._read(wanted)
        for key in wanted:
            self._hold(key, read.get(key))
        out = {}
        for key in keys:
            self.items.move_to_end(key)
            out[key] = self.items[key]
        return out

    def get(self, key: str) -> Cached | None:
        """The cached entry of `key`, or None."""
        return self.get_many([key])[key]

    def put_many(self, items: Mapping[str, Cached]) -> None:
        """Add entries, written at the next `flush`."""
        self.pending.update(items)
        for key, entry in items.items():
            self._hold(key, entry)

    def flush(self) -> int:
        """Write pending entries; returns how many."""
        import pyarrow as pa

        if not self.pending:
            return 0
        data = pa.table(
            {
                "key": list(self.pending),
                "text": [c.text for c in self.pending.values()],
                "seconds": [c.seconds for c in self.pending.values()],
            },
            schema=self._schema,
        )
        self.table.merge_insert("key").when_not_matched_insert_all().execute(data)
        n = len(self.pending)
        self.pending = {}
        self._fold()
        return n

    FOLD_FRACTION = 0.1
    """Rows the key index may leave uncovered, as a share of the table, before a flush folds them in."""

    def _fold(self) -> None:
        """Fold new rows into the key index once they pass `FOLD_FRACTION` of the table (the index's own
        rule, `corpus.index_tables`): lookups scan only uncovered rows, so their share stays bounded instead
        of growing with every sweep (a precompute adds the whole corpus at once). No version is removed.
        """
        if not self._indexed:
            self._index_once()
            return
        unindexed = max((getattr(i, "num_unindexed_rows", 0) or 0 for i in self.table.list_indices()), default=0)
        if unindexed > self.FOLD_FRACTION * self.table.count_rows():
            from corpus.index_tables import KEEP_VERSIONS

            self.table.optimize(cleanup_older_than=KEEP_VERSIONS)
