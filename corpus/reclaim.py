"""Reclaiming old builds: the chunk versions and side tables that no kept snapshot needs, removed together.

A sync never removes an earlier version of a table (its compaction keeps them all), so a run pinned to any
committed snapshot can always be read again, until `reclaim_index` runs. It keeps the latest `keep_last`
snapshots and every snapshot a claim names (`corpus.lease`: a stored run, by the index's build id and digest,
or a live reader's lease), and every snapshot committed after the oldest of them: LanceDB's cleanup removes by
age, never by a list, so a snapshot between two kept ones keeps its chunk versions, and keeps its side tables
too (it stays whole). Older ones go: chunk-table versions, side tables only they name (dropped whole), and
side-table versions before the oldest one a kept snapshot pins. A snapshot whose tables were reclaimed is
refused by `corpus.snapshot.read_snapshot` with a one-line error naming it, never read half.

Two guards keep a kept version from being removed, whatever the clocks do. Each version a kept snapshot pins
is tagged (`cribsheet-keep-<version>`): LanceDB's prune refuses to run, removing nothing, when its cutoff
would reach a tagged version. And the cutoff is computed only after the table is compacted: LanceDB 0.40's
only prune is `optimize`, which compacts first and computes its cutoff (now minus the age) when the prune
starts, so a compaction run inside the prune call would move the cutoff by however long it took. The age is
taken from epoch seconds (UTC), never from LanceDB's naive local timestamps subtracted from each other, which
are an hour short across a daylight-saving change.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from corpus.errors import CribsheetError
from corpus.index import KEEP_VERSIONS, writer_lock
from corpus.lease import IndexPin, lease_pins, reclaim_lease_lock
from corpus.snapshot import IndexSnapshot, _from_row, _snapshot_rows, missing_tables, table_names
from corpus.table import TABLE

MARGIN = dt.timedelta(seconds=2)
"""Versions this close before the oldest kept one stay too: LanceDB reads its clock a moment after ours (the
prune call's own compaction finds nothing left to do), and the tags turn an overshoot into a refusal."""
COMPACTION_PASSES = 4
"""At most this many compactions before the prune (one leaves work for a second at times; a third finds none)."""
KEEP_TAG = "cribsheet-keep-"
"""Prefix of the tags reclaim puts on the versions it keeps (a tag of another prefix is never touched)."""


class ReclaimReport(BaseModel):
    """What a reclaim kept and removed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kept_snapshots: list[int]
    """Chunk versions of the snapshots kept whole: those claimed, the latest, and every one after the oldest."""
    claimed_snapshots: list[int]
    """Chunk versions of the snapshots a claim named (a stored run or a reader's lease)."""
    removed_versions: list[int]
    """Chunk-table versions removed."""
    dropped_tables: list[str]
    """Side tables dropped whole (only reclaimed snapshots named them)."""
    trimmed_tables: dict[str, int]
    """Side tables kept, with how many of their older versions were removed."""
    unknown_claims: list[str]
    """Claims on this index (its builds) that name no whole committed snapshot of it (nothing kept for them)."""
    stale_leases: list[str]
    """Lease files of readers of this host that are gone, removed."""


def _epochs(table: Any) -> dict[int, float]:
    """Each version of `table` and its commit time in epoch seconds. LanceDB gives naive local times; in a
    repeated hour (a daylight-saving fall-back) one reads as its earlier instant, which only makes the age
    longer, so a prune removes less, never more.
    """
    return {int(v["version"]): v["timestamp"].timestamp() for v in table.list_versions()}


def _tag(table: Any, keep: set[int]) -> None:
    """Tag every version in `keep`; remove reclaim's tags of versions no longer kept (before the prune: LanceDB
    refuses to prune past a tagged version).
    """
    tags = {name: int(t["version"]) for name, t in table.tags.list().items()}
    for version in sorted(keep):
        if tags.get(f"{KEEP_TAG}{version}") != version:
            table.tags.create(f"{KEEP_TAG}{version}", version)
    for name, version in tags.items():
        if name.startswith(KEEP_TAG) and version not in keep:
            table.tags.delete(name)


def _compact(table: Any) -> None:
    """Compact `table` (and fold its indices) until a pass finds nothing left, removing no version: however
    long it takes, the prune's own compaction then has nothing to do (a pass can leave work for the next).
    """
    for _ in range(COMPACTION_PASSES):
        version = int(table.version)
        table.optimize(cleanup_older_than=KEEP_VERSIONS)
        if int(table.version) == version:
            return


def _trim(table: Any, keep: set[int]) -> int:
    """Remove the versions of `table` older than the oldest in `keep`, every version in `keep` tagged first;
    returns how many went.
    """
    before = _epochs(table)
    gone = sorted(keep - set(before))
    if gone:
        raise CribsheetError(f"table '{table.name}': kept versions {gone} are already gone; nothing removed")
    _tag(table, keep)
    oldest = min(keep)
    if not any(v < oldest for v in before):
        return 0
    _compact(table)
    age = dt.timedelta(seconds=time.time() - before[oldest]) + MARGIN  # after it, right before the prune
    try:
        table.optimize(cleanup_older_than=max(age, MARGIN))
    except RuntimeError as exc:
        if "tagged version" not in str(exc):
            raise
        raise CribsheetError(
            f"table '{table.name}': the prune would have reached a kept version, so it removed nothing "
            f"({str(exc).splitlines()[0]}); run `cribsheet reclaim` again"
        ) from None
    after = _epochs(table)
    lost = sorted(keep - set(after))
    if lost:  # the tags forbid it; said loudly if LanceDB ever disagrees
        raise CribsheetError(f"table '{table.name}': reclaim removed kept versions {lost}")
    return len([v for v in before if v not in after])


class _Plan(BaseModel):
    kept: list[IndexSnapshot]
    claimed: list[int]
    unknown: list[str]


def _plan(path: Path, snapshots: list[IndexSnapshot], pins: list[IndexPin], keep_last: int) -> _Plan:
    """Which snapshots stay: those claimed or among the latest `keep_last`, if whole, and every whole one
    committed after the oldest of them.
    """
    builds = {s.build_id for s in snapshots}
    ours = [p for p in pins if p.about(path, builds)]
    claimed = [s for s in snapshots if any(p.names(s) for p in ours)]
    whole = [s for s in [*claimed, *snapshots[-keep_last:]] if not missing_tables(path, s)]
    if not whole:
        raise CribsheetError(f"{path}: the latest snapshots are not whole (tables gone); nothing removed")
    oldest = min(s.chunk_version for s in whole)
    kept = [s for s in snapshots if s.chunk_version >= oldest and (s in whole or not missing_tables(path, s))]
    unknown = [f"{p.source} (chunk version {p.chunk_version})" for p in ours if not any(p.names(s) for s in kept)]
    return _Plan(kept=kept, claimed=sorted({s.chunk_version for s in claimed if s in kept}), unknown=unknown)


def reclaim_index(path: Path, claims: Callable[[], Iterable[IndexPin]] = tuple, keep_last: int = 1) -> ReclaimReport:
    """Remove the builds of the index at `path` older than what the kept snapshots need: the latest
    `keep_last`, those `claims()` names (read under the index's locks, so a run claimed meanwhile is seen) and
    those live reader leases name. Holds the writer lock, so it never runs beside a sync.
    """
    import lancedb

    if keep_last < 1:
        raise CribsheetError(f"--keep-last must be at least 1 (the latest snapshot is always kept), got {keep_last}")
    path = Path(path)
    if not path.is_dir():
        raise CribsheetError(f"{path}: no index here, so no committed snapshot; nothing to reclaim")
    with writer_lock(path), reclaim_lease_lock(path):
        rows = _snapshot_rows(path)
        if not rows:
            raise CribsheetError(f"{path}: no committed snapshot here; nothing to reclaim")
        live, stale = lease_pins(path)
        plan = _plan(path, [_from_row(r) for r in rows], [*claims(), *live], keep_last)
        db = lancedb.connect(str(path))
        chunks = db.open_table(TABLE)
        before = set(_epochs(chunks))
        _trim(chunks, {s.chunk_version for s in plan.kept})
        pinned: dict[str, set[int]] = {}
        for snap in plan.kept:
            for ref in snap.tables.values():
                pinned.setdefault(ref.name, set()).add(ref.version)
        named = {ref.name for r in rows for ref in _from_row(r).tables.values()}
        dropped = sorted((named - set(pinned)) & set(table_names(db)))
        for name in dropped:
            db.drop_table(name)
        trimmed = {name: _trim(db.open_table(name), versions) for name, versions in sorted(pinned.items())}
        removed = sorted(before - set(_epochs(db.open_table(TABLE))))
    return ReclaimReport(
        kept_snapshots=[s.chunk_version for s in plan.kept],
        claimed_snapshots=plan.claimed,
        removed_versions=removed,
        dropped_tables=dropped,
        trimmed_tables=trimmed,
        unknown_claims=plan.unknown,
        stale_leases=stale,
    )
