"""A setting's rows off the heap: blocks of sample and claim rows written to a DuckDB file of a temporary
folder as they are computed, moved into the results store in the setting's one transaction at the end.

A setting of 100,000 questions held as row objects until its transaction costs gigabytes; its blocks written
here as they finish keep the sweep's memory flat in the question count, and the store still gets the whole
setting or nothing (a sweep killed mid-setting leaves only the temporary file, removed with its folder).
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eval.store.rows import ClaimRow, SampleRow


class RowSpill:
    """Sample and claim rows of one setting, appended block by block to `rows.duckdb` in a temporary folder."""

    def __init__(self) -> None:
        import duckdb

        from eval.store.database import DuckDBStore
        from eval.store.schema import TABLES, columns

        self._dir = tempfile.TemporaryDirectory(prefix="cribsheet-rows-")
        self.path = Path(self._dir.name) / "rows.duckdb"
        self._con: Any = duckdb.connect(str(self.path))
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
