"""Query-agnostic compressions, computed once per (compressor, ratio, passage text) and reused forever."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

TABLE = "compressions"


def cache_key(compressor: str, ratio: float, text: str) -> str:
    """Content key: the same passage compressed the same way is the same entry in every run."""
    return hashlib.sha256(f"{compressor}\x1f{ratio:g}\x1f{text}".encode()).hexdigest()


class CompressionCache(Protocol):
    """Maps cache keys to compressed passage text."""

    def get(self, key: str) -> str | None:
        """The cached text of `key`, or None."""
        ...

    def put_many(self, items: Mapping[str, str]) -> None:
        """Add entries."""
        ...

    def flush(self) -> int:
        """Persist entries added since the last flush; returns how many."""
        ...


class MemoryCache:
    """A dict: one process, gone at exit."""

    def __init__(self) -> None:
        self.items: dict[str, str] = {}

    def get(self, key: str) -> str | None:
        """The cached text of `key`, or None."""
        return self.items.get(key)

    def put_many(self, items: Mapping[str, str]) -> None:
        """Add entries."""
        self.items.update(items)

    def flush(self) -> int:
        """Nothing to persist."""
        return 0


class LanceCompressionCache:
    """A `compressions` table next to the chunks in the index's LanceDB folder.

    Entries are loaded once and new ones are written with one merge per `flush`, so a reader
    never sees half a batch; entries are keyed by content, so concurrent writers cannot conflict.
    """

    def __init__(self, index_path: Path) -> None:
        import lancedb
        import pyarrow as pa

        self._schema = pa.schema([pa.field("key", pa.string()), pa.field("text", pa.string())])
        db = lancedb.connect(str(index_path))
        try:
            self.table: Any = db.open_table(TABLE)
        except (ValueError, FileNotFoundError):
            self.table = db.create_table(TABLE, schema=self._schema, exist_ok=True)
        rows = self.table.to_arrow() if self.table.count_rows() else None
        self.items: dict[str, str] = (
            dict(zip(rows.column("key").to_pylist(), rows.column("text").to_pylist(), strict=True)) if rows else {}
        )
        self.pending: dict[str, str] = {}

    def get(self, key: str) -> str | None:
        """The cached text of `key`, or None."""
        return self.items.get(key)

    def put_many(self, items: Mapping[str, str]) -> None:
        """Add entries, written at the next `flush`."""
        self.items.update(items)
        self.pending.update(items)

    def flush(self) -> int:
        """Write pending entries; returns how many."""
        import pyarrow as pa

        if not self.pending:
            return 0
        data = pa.table({"key": list(self.pending), "text": list(self.pending.values())}, schema=self._schema)
        self.table.merge_insert("key").when_not_matched_insert_all().execute(data)
        n = len(self.pending)
        self.pending = {}
        return n
