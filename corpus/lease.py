"""Claims on index snapshots, which `cribsheet reclaim` keeps: stored runs' and live readers' leases.

A claim names a snapshot by the index's identity, its build id and digest (`runs.index_build_id`,
`runs.index_sha256`), never by the path it was reached through: a store written from another working folder,
through a symlink or on another host's mount names the same snapshot. A run stored before those columns is
matched by its chunk version and its path, a relative one resolved against both the working folder and the
store's folder (the folder the run was started from is not stored).

A reader that pins a snapshot without writing a run row (`train-scorer`, `tune-pruning`) holds a *lease* while
it reads: a file in the index folder's `.readers/` naming the snapshot, its process and host. The lease is
taken, and the snapshot checked whole, under the lease lock that a reclaim holds from reading the claims to its
last removal, so a reader's snapshot is either protected or refused by name, never read half.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from corpus.errors import CribsheetError
from corpus.snapshot import IndexSnapshot, read_snapshot

LEASES = ".readers"
"""Folder of the index holding one file per live reader lease."""
LEASE_LOCK = ".readers.lock"
"""Held by a reader while it takes a lease, and by a reclaim from reading the leases to its last removal."""
READER_WAIT_S = 3600.0
"""How long a reader waits for a reclaim that holds the lease lock (one prunes a large index in minutes)."""
RECLAIM_WAIT_S = 60.0
"""How long a reclaim waits for a reader taking its lease (a moment)."""


class IndexPin(BaseModel):
    """One claim on a snapshot of an index: a stored run's, or a live reader's lease."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str
    """Who claims it, for messages: `<store>: run <id>`, or the lease file."""
    index_sha256: str | None = None
    """The snapshot's digest; None: a run stored before identities, matched by `chunk_version` and `paths`."""
    build_id: str = ""
    """The snapshot's build."""
    chunk_version: int | None = None
    """The snapshot's chunk version (as the claim recorded it)."""
    paths: tuple[str, ...] = ()
    """Resolved folders the index of an identity-less run may be in (its path against each possible base)."""

    @classmethod
    def of(cls, snapshot: IndexSnapshot, source: str) -> IndexPin:
        """The claim `source` makes on `snapshot`."""
        return cls(
            source=source,
            index_sha256=snapshot.index_sha256,
            build_id=snapshot.build_id,
            chunk_version=snapshot.chunk_version,
        )

    @classmethod
    def of_run(cls, source: str, run: Mapping[str, Any], store_folder: Path) -> IndexPin:
        """The claim of a stored run (its `index_path`, `index_version`, `index_build_id`, `index_sha256`); a
        relative path may be relative to the folder the run started in, unknown here: the working folder's
        and the store's are both tried.
        """
        written = Path(run["index_path"])
        return cls(
            source=source,
            index_sha256=run["index_sha256"],
            build_id=run["index_build_id"] or "",
            chunk_version=run["index_version"],
            paths=tuple(sorted({str(written.resolve()), str((store_folder / written).resolve())})),
        )

    def names(self, snapshot: IndexSnapshot) -> bool:
        """Whether this claim is on `snapshot` (the caller has checked `about` the index)."""
        if self.index_sha256 is not None:
            return self.index_sha256 == snapshot.index_sha256 and self.build_id == snapshot.build_id
        return self.chunk_version == snapshot.chunk_version

    def about(self, index: Path, builds: set[str]) -> bool:
        """Whether this claim is on the index at `index`, whose snapshots have build ids `builds`."""
        if self.index_sha256 is not None:
            return self.build_id in builds
        return str(Path(index).resolve()) in self.paths


@contextmanager
def _lease_lock(path: Path, wait_s: float) -> Iterator[None]:
    from filelock import FileLock, Timeout

    lock = FileLock(str(path / LEASE_LOCK), timeout=wait_s)
    try:
        lock.acquire()
    except Timeout:
        raise CribsheetError(
            f"{path}: lease lock {lock.lock_file} held for over {wait_s:.0f} s (a reclaim or a reader); try again"
        ) from None
    try:
        yield
    finally:
        lock.release()


@contextmanager
def reclaim_lease_lock(path: Path) -> Iterator[None]:
    """The lease lock, held by a reclaim from reading the leases to its last removal."""
    with _lease_lock(path, RECLAIM_WAIT_S):
        yield


@contextmanager
def reader_lease(path: Path, version: int | None = None) -> Iterator[IndexSnapshot]:
    """The committed snapshot of the index at `path` at chunk `version` (the latest when None), kept by
    `cribsheet reclaim` while the block runs: a lease file names it until the block ends. A snapshot already
    reclaimed is refused by name.
    """
    path = Path(path)
    read_snapshot(path, version)  # a missing index or version is named before any lock file is made
    lease = path / LEASES / f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}.json"
    with _lease_lock(path, READER_WAIT_S):
        snapshot = read_snapshot(path, version)
        lease.parent.mkdir(exist_ok=True)
        lease.write_text(
            json.dumps(
                IndexPin.of(snapshot, str(lease)).model_dump(exclude={"source", "paths"})
                | {"pid": os.getpid(), "host": socket.gethostname(), "since_utc": time.time()}
            )
        )
    try:
        yield snapshot
    finally:
        lease.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def lease_pins(path: Path) -> tuple[list[IndexPin], list[str]]:
    """The claims of the live leases of the index at `path`, and the stale lease files it removed: those of a
    process of this host that is gone. A lease of another host is live until its reader removes it (its
    process cannot be seen from here).
    """
    pins: list[IndexPin] = []
    stale: list[str] = []
    for file in sorted((Path(path) / LEASES).glob("*.json")):
        try:
            raw = json.loads(file.read_text())
            host, pid = str(raw.pop("host")), int(raw.pop("pid"))
            raw.pop("since_utc", None)
            pin = IndexPin(source=str(file), **raw)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CribsheetError(f"{file}: unreadable reader lease ({exc}); remove it if no reader holds it") from None
        if host == socket.gethostname() and not _alive(pid):
            file.unlink(missing_ok=True)
            stale.append(str(file))
        else:
            pins.append(pin)
    return pins, stale
