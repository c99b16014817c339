"""Reclaiming old builds: the chunk versions and side tables that no kept snapshot needs, removed together.

A sync never removes an earlier version of a table (its compaction keeps them all), so a run pinned to any
committed snapshot can always be read again, until `reclaim_index` runs. It keeps the latest `keep_last`
snapshots and every snapshot a stored run names (`keep_versions`, the chunk versions read from the results
stores), and removes what is older than the oldest of them: chunk-table versions before it, side tables that
only older snapshots name (dropped whole), and side-table versions before the oldest one a kept snapshot pins.
Versions between two kept snapshots stay (LanceDB's cleanup removes by age, never by a list), so the rule is
"older than what any stored run needs". A snapshot whose tables were reclaimed is refused by
`corpus.snapshot.read_snapshot` with a one-line error naming it, never read half.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from corpus.errors import CribsheetError
from corpus.index import writer_lock
from corpus.snapshot import _from_row, _snapshot_rows, missing_tables, table_names
from corpus.table import TABLE

MARGIN = dt.timedelta(seconds=2)
"""Versions this close before the oldest kept one stay too: LanceDB measures age from its own clock, read a
moment after ours, and a threshold that lands after the kept version would remove it."""


class ReclaimReport(BaseModel):
    """What a reclaim kept and removed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kept_snapshots: list[int]
    """Chunk versions of the snapshots kept (the latest ones and those a stored run names)."""
    removed_versions: list[int]
    """Chunk-table versions removed."""
    dropped_tables: list[str]
    """Side tables dropped whole (only reclaimed snapshots named them)."""
    trimmed_tables: dict[str, int]
    """Side tables kept, with how many of their older versions were removed."""
    unknown_versions: list[int]
    """Versions a stored run names that are no committed snapshot of this index (nothing kept for them)."""


def _versions(table: Any) -> dict[int, dt.datetime]:
    return {int(v["version"]): v["timestamp"] for v in table.list_versions()}


def _trim(table: Any, oldest_kept: int) -> int:
    """Remove the versions of `table` older than `oldest_kept` (by LanceDB's cleanup, which goes by age);
    returns how many went. The table's compaction runs with it, as in a sync.
    """
    before = _versions(table)
    if oldest_kept not in before:
        raise CribsheetError(f"table '{table.name}': version {oldest_kept} is already gone; nothing removed")
    if not any(v < oldest_kept for v in before):
        return 0
    age = dt.datetime.now() - before[oldest_kept] + MARGIN
    table.optimize(cleanup_older_than=age)
    after = _versions(table)
    lost = [v for v in before if v >= oldest_kept and v not in after]
    if lost:  # cannot happen by the margin above; said loudly if LanceDB's clock ever disagrees
        raise CribsheetError(f"table '{table.name}': reclaim removed kept versions {lost}")
    return len([v for v in before if v not in after])


def reclaim_index(path: Path, keep_versions: Iterable[int] = (), keep_last: int = 1) -> ReclaimReport:
    """Remove the builds of the index at `path` older than what the kept snapshots need: the latest
    `keep_last` and those whose chunk version is in `keep_versions`. Holds the index's writer lock, so it never
    runs beside a sync.
    """
    import lancedb

    if keep_last < 1:
        raise CribsheetError(f"--keep-last must be at least 1 (the latest snapshot is always kept), got {keep_last}")
    path = Path(path)
    with writer_lock(path):
        rows = _snapshot_rows(path)
        if not rows:
            raise CribsheetError(f"{path}: no committed snapshot here; nothing to reclaim")
        snapshots = [_from_row(r) for r in rows]
        wanted = set(keep_versions)
        committed = {s.chunk_version for s in snapshots}
        kept = [s for s in snapshots if s.chunk_version in wanted] + snapshots[-keep_last:]
        kept = [s for s in kept if not missing_tables(path, s)]  # a snapshot already reclaimed keeps nothing
        db = lancedb.connect(str(path))
        chunks = db.open_table(TABLE)
        before = set(_versions(chunks))
        _trim(chunks, min(s.chunk_version for s in kept))
        removed = sorted(before - set(_versions(chunks)))
        pinned: dict[str, int] = {}
        for snap in kept:
            for ref in snap.tables.values():
                pinned[ref.name] = min(ref.version, pinned.get(ref.name, ref.version))
        present = set(table_names(db))
        named = {ref.name for s in snapshots for ref in s.tables.values()}
        dropped = sorted((named - set(pinned)) & present)
        for name in dropped:
            db.drop_table(name)
        trimmed = {name: _trim(db.open_table(name), version) for name, version in sorted(pinned.items())}
    return ReclaimReport(
        kept_snapshots=sorted({s.chunk_version for s in kept}),
        removed_versions=removed,
        dropped_tables=dropped,
        trimmed_tables=trimmed,
        unknown_versions=sorted(wanted - committed),
    )
