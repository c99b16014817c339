"""Scratch storage a sweep keeps off the heap, so its memory does not grow with its question count.

`RankedLists`: the reranked candidate lists that a sweep's settings share, in a SQLite file. `RowSpill`: a
setting's sample and claim rows, written block by block to a DuckDB file as they are computed and moved into
the results store in the setting's one transaction at the end (`DuckDBStore.add_spilled_samples`), so the store
still gets the whole setting or nothing (a sweep killed mid-setting leaves only the temporary file, removed
with its folder). Both live in a temporary folder removed with the object.
"""

from __future__ import annotations

import pickle
import sqlite3
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from corpus.models import Hit
from eval.store.rows import ClaimRow, SampleRow
from eval.store.schema import TABLES, columns


class RankedLists:
    """Reranked candidate lists by (mode, reranker, question id) in a SQLite file of a temporary folder (removed
    with the object): what a sweep shares between settings, kept off the heap. Hits are stored without their
    vectors (a reranker's input, not needed after it).
    """

    def __init__(self) -> None:
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._con: sqlite3.Connection | None = None

    def _db(self) -> sqlite3.Connection:
        if self._con is None:
            self._dir = tempfile.TemporaryDirectory(prefix="cribsheet-ranked-")
            self._con = sqlite3.connect(Path(self._dir.name) / "ranked.sqlite", check_same_thread=False)
            self._con.execute("CREATE TABLE ranked (key TEXT PRIMARY KEY, hits BLOB, retrieve_s REAL, rerank_s REAL)")
        return self._con

    @staticmethod
    def _key(key: tuple[str, str, str]) -> str:
        return "\x1f".join(key)

    def put(self, key: tuple[str, str, str], hits: list[Hit], retrieve_s: float, rerank_s: float) -> None:
        """Store one question's ranked list and what retrieving and reranking it took (committed by `commit`)."""
        blob = pickle.dumps([h.model_copy(update={"vector": None}) for h in hits], protocol=pickle.HIGHEST_PROTOCOL)
        row = (self._key(key), blob, retrieve_s, rerank_s)
        self._db().execute("INSERT OR REPLACE INTO ranked VALUES (?, ?, ?, ?)", row)

    def commit(self) -> None:
        """Make every list put so far readable."""
        self._db().commit()

    def has(self, key: tuple[str, str, str]) -> bool:
        """Whether a list is stored under `key`."""
        row = self._db().execute("SELECT 1 FROM ranked WHERE key = ?", (self._key(key),)).fetchone()
        return row is not None

    def get(self, key: tuple[str, str, str]) -> tuple[list[Hit], float, float]:
        """The ranked list stored under `key`, its retrieval and rerank seconds (KeyError when there is none)."""
        sql = "SELECT hits, retrieve_s, rerank_s FROM ranked WHERE key = ?"
        row = self._db().execute(sql, (self._key(key),)).fetchone()
        if row is None:
            raise KeyError(key)
        hits: list[Hit] = pickle.loads(row[0])  # noqa: S301 (our own file, written above)
        return hits, float(row[1]), float(row[2])


class RowSpill:
    """Sample and claim rows of one setting, appended block by block to `rows.duckdb` in a temporary folder."""

    def __init__(self) -> None:
        import duckdb

        from eval.store.database import DuckDBStore

        self._dir = tempfile.TemporaryDirectory(prefix="cribsheet-rows-")
        self.path = Path(self._dir.name) / "rows.duckdb"
        # a small buffer pool: written blocks go to the file, not the heap (DuckDB keeps pages up to its limit)
        self._con: Any = duckdb.connect(str(self.path), config={"memory_limit": "64MB"})
        for table in ("samples", "claims"):
            self._con.execute(f"CREATE TABLE {table} ({', '.join(f'{n} {t}' for n, t in columns(TABLES[table]))})")
        self._insert = DuckDBStore._insert
        self.n_rows = 0
        self.n_failed = 0
        self.first_error: str | None = None

    def add(self, rows: Sequence[SampleRow], claims: Sequence[ClaimRow]) -> None:
        """Append one block's rows and claim evidence."""
        self._con.execute("BEGIN")
        self._insert(self._con, "samples", rows)
        self._insert(self._con, "claims", claims)
        self._con.execute("COMMIT")
        self.n_rows += len(rows)
        failed = [r for r in rows if r.status != "ok"]
        self.n_failed += len(failed)
        if failed and self.first_error is None:
            self.first_error = failed[0].error

    def close(self) -> Path:
        """Finish writing; the file's path, for the store to read (it stays until `remove`)."""
        self._con.close()
        return self.path

    def remove(self) -> None:
        """Delete the file and its folder."""
        self._dir.cleanup()
