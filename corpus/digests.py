"""Content digests: of a file's bytes, and of an index table's rows, whole or as the running sums a sync keeps.

`file_sha256` is a file's sha256, read in blocks (question files, a trained scorer's inputs; `corpus.weights`
caches it for weights files). `content_digest` hashes every row of a table, independent of row order. The
`Ledger` holds a build's digests as sums of row digests modulo 2^256, so a sync updates them with what it
writes and removes instead of reading the whole index again; `corpus.snapshot` stores it with each committed
snapshot. This module imports no other cribsheet module, so any of them may use it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes, read in blocks (a large file is never held whole)."""
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def content_digest(table: Any) -> str:
    """sha256 over every row of a table at its checked-out version, independent of row order: each row's
    digest (vectors by their float32 bytes, other values by their JSON) sorted, then hashed together.
    """
    h = hashlib.sha256(",".join(sorted(table.schema.names)).encode())
    for row in sorted(_row_digests(table.to_arrow())):
        h.update(row)
    return h.hexdigest()


MODULUS = 1 << 256
"""Row digests are summed modulo 2^256: a multiset digest, independent of row order, that a sync updates by
adding the rows it writes and subtracting the rows it removes, without reading the rest of the index."""


def _sum(hashes: Any) -> int:
    return sum(int.from_bytes(h, "big") for h in hashes) % MODULUS


def chunk_rows_sum(rows: Any) -> int:
    """The digest sum of chunk rows (an Arrow table with `chunk_id` and `text`)."""
    ids, texts = rows.column("chunk_id").to_pylist(), rows.column("text").to_pylist()
    return _sum(
        hashlib.sha256(f"{c}\x1f{hashlib.sha256(t.encode()).hexdigest()}".encode()).digest()
        for c, t in zip(ids, texts, strict=True)
    )


def corpus_pairs_sum(pairs: Any) -> int:
    """The digest sum of (document id, content hash) pairs, each counted once."""
    return _sum(hashlib.sha256(f"{d}\x1f{h}".encode()).digest() for d, h in set(pairs))


def side_rows_sum(table: Any) -> int:
    """The digest sum of side-table rows (an Arrow table): each row's digest as `content_digest` makes it."""
    return _sum(_row_digests(table))


def _row_digests(table: Any) -> list[bytes]:
    import pyarrow as pa

    rows: list[bytes] = []
    for batch in table.to_batches():
        columns: list[list[bytes]] = []
        for name in sorted(batch.schema.names):
            column = batch.column(name)
            if pa.types.is_fixed_size_list(column.type):
                values = np.asarray(column.flatten().to_numpy(zero_copy_only=False), dtype=np.float32)
                width = column.type.list_size
                columns.append([values[i * width : (i + 1) * width].tobytes() for i in range(len(column))])
            else:
                columns.append([json.dumps(v, sort_keys=True, default=str).encode() for v in column.to_pylist()])
        rows.extend(hashlib.sha256(b"\x1f".join(parts)).digest() for parts in zip(*columns, strict=True))
    return rows


class Ledger(BaseModel):
    """The running digest sums of one build's tables, kept in its snapshot row, so the next sync updates
    them with what it writes and removes (O(what changed)) instead of reading the whole index again.
    """

    chunks: int = 0
    corpus: int = 0
    sides: dict[str, int] = {}

    def add(self, field: str, value: int, sign: int = 1) -> None:
        """Add (or, sign -1, subtract) a digest sum to `chunks`, `corpus` or a side kind."""
        if field in ("chunks", "corpus"):
            setattr(self, field, (getattr(self, field) + sign * value) % MODULUS)
        else:
            self.sides[field] = (self.sides.get(field, 0) + sign * value) % MODULUS

    def dumps(self) -> str:
        """JSON of the sums as hex (the snapshot row's `sums`)."""
        return json.dumps(
            {"chunks": f"{self.chunks:064x}", "corpus": f"{self.corpus:064x}",
             "sides": {k: f"{v:064x}" for k, v in sorted(self.sides.items())}},
            sort_keys=True,
        )  # fmt: skip

    @classmethod
    def loads(cls, text: str) -> Ledger:
        """The sums of a snapshot row."""
        raw = json.loads(text)
        return cls(
            chunks=int(raw["chunks"], 16),
            corpus=int(raw["corpus"], 16),
            sides={k: int(v, 16) for k, v in raw["sides"].items()},
        )

    @classmethod
    def of_tables(cls, chunks: Any, sides: dict[str, Any]) -> Ledger:
        """The sums read from the tables themselves (whole reads: an index from before ledgers, or a check)."""
        n = max(chunks.count_rows(), 1)
        rows = chunks.search().select(["chunk_id", "text", "doc_id", "doc_hash"]).limit(n).to_arrow()
        pairs = zip(rows.column("doc_id").to_pylist(), rows.column("doc_hash").to_pylist(), strict=True)
        ledger = cls(chunks=chunk_rows_sum(rows), corpus=corpus_pairs_sum(pairs))
        for kind, table in sides.items():
            if table is not None:
                ledger.sides[kind] = side_rows_sum(table.to_arrow())
        return ledger
