"""Query-agnostic compressions, computed once per content address and reused forever, each kept with what
computing it cost (its cold cost), so a request served from the cache can still report the whole bill.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
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

    def put_many(self, items: Mapping[str, Cached]) -> None:
        """Add entries."""
        self.items.update(items)

    def flush(self) -> int:
        """Nothing to persist."""
        return 0


class LanceCompressionCache:
    """A `compressions_v2` table next to the chunks in the index's LanceDB folder.

    Entries are loaded once and new ones are written with one merge on the key per `flush`, so a reader
    never sees half a batch; entries are keyed by content, so concurrent writers write the same entry, and
    where both inserted it, every reader picks the same copy.
    """

    def __init__(self, index_path: Path) -> None:
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
        rows = self.table.to_arrow() if self.table.count_rows() else None
        self.items: dict[str, Cached] = {}
        if rows is not None:
            for key, text, seconds in sorted(
                zip(
                    rows.column("key").to_pylist(),
                    rows.column("text").to_pylist(),
                    rows.column("seconds").to_pylist(),
                    strict=True,
                ),
                reverse=True,
            ):
                # Two workers that computed one key at once may both have inserted it (lance-format/lance#4585):
                # the same entry is chosen in every process (the lowest text, then seconds).
                self.items[key] = Cached(text, seconds)
        self.pending: dict[str, Cached] = {}

    def get(self, key: str) -> Cached | None:
        """The cached entry of `key`, or None."""
        return self.items.get(key)

    def put_many(self, items: Mapping[str, Cached]) -> None:
        """Add entries, written at the next `flush`."""
        self.items.update(items)
        self.pending.update(items)

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
        return n
