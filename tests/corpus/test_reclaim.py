"""Reclaiming old builds: what no kept snapshot needs goes (chunk versions and side tables together), a kept
snapshot reads exactly as before whatever the compaction's duration or the time zone, a snapshot between two kept
ones stays whole, a reader's lease keeps its snapshot, and a reclaimed one is refused by name."""

from __future__ import annotations

import datetime as dt
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from corpus.chunk import SentenceChunker
from corpus.errors import CribsheetError
from corpus.index import KEEP_VERSIONS, IndexOptions, open_table, sync_index, writer_lock
from corpus.lease import LEASES, IndexPin, reader_lease
from corpus.models import Document
from corpus.reclaim import ReclaimReport, reclaim_index
from corpus.sentences import SentenceVectors
from corpus.snapshot import latest_snapshot, read_snapshot, table_names
from tests.corpus.test_sentences import SpanHashEmbedder, _guide
from tests.corpus.test_snapshot import DOCS, SENTENCE, build


def _chunks_at(path: Path, version: int) -> list[dict[str, object]]:
    rows = open_table(path, version).to_arrow().drop_columns(["vector"]).to_pylist()
    return sorted(rows, key=lambda r: str(r["chunk_id"]))


def _reclaim(path: Path, *claimed: int, **kw: Any) -> ReclaimReport:
    """Reclaim keeping the snapshots of chunk versions `claimed`, as stored runs would claim them."""
    pins = [IndexPin.of(read_snapshot(path, v), f"run at {v}") for v in claimed]
    return reclaim_index(path, lambda: pins, **kw)


def _four_snapshots(path: Path, pause: float = 1.0) -> list[int]:
    """Build 1, build 2, a one-document sync of build 2 (`pause` seconds later), build 3: their chunk versions."""
    versions = []
    build(path)
    versions.append(read_snapshot(path).chunk_version)
    build(path, rebuild=True)
    versions.append(read_snapshot(path).chunk_version)
    time.sleep(pause)  # LanceDB removes by age: the kept snapshot stands clear of the ones before it
    edited = [*DOCS[:-1], Document(id=DOCS[-1].id, title="Doc 5", text="Document 5 was edited tonight."), _guide()]
    sync_index(edited, SentenceChunker(), SpanHashEmbedder(), path, IndexOptions(sentence_vectors=True, batch_chunks=1))
    versions.append(read_snapshot(path).chunk_version)
    build(path, rebuild=True)
    versions.append(read_snapshot(path).chunk_version)
    return versions


def _whole(path: Path, version: int) -> tuple[Any, ...]:
    """What a reader of the snapshot at `version` gets: the snapshot, its chunks and a sentence vector."""
    vector = SentenceVectors(path, version).lookup_with_cost([SENTENCE])[0][SENTENCE]
    return read_snapshot(path, version), _chunks_at(path, version), vector.tobytes()


def test_reclaim_removes_what_no_kept_snapshot_needs_and_keeps_the_named_one_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lancedb

    monkeypatch.setattr("corpus.reclaim.MARGIN", dt.timedelta(seconds=0.5))
    path = tmp_path / "idx.lancedb"
    first, second, synced, latest = _four_snapshots(path)
    named = read_snapshot(path, synced)
    rows = _chunks_at(path, synced)
    vector = SentenceVectors(path, synced).lookup_with_cost([SENTENCE])[0][SENTENCE]
    first_tables = {ref.name for ref in read_snapshot(path, first).tables.values()}
    assert first_tables and first_tables.isdisjoint(ref.name for ref in named.tables.values())
    stray = IndexPin(source="run x", index_sha256="0" * 64, build_id=named.build_id, chunk_version=10_000)
    other = IndexPin(source="run of another index", index_sha256="1" * 64, build_id="elsewhere", chunk_version=3)

    rep = reclaim_index(path, lambda: [IndexPin.of(named, "run y"), stray, other])

    assert rep.kept_snapshots == [synced, latest] and rep.claimed_snapshots == [synced]
    assert rep.unknown_claims == ["run x (chunk version 10000)"]  # this index's build; another index's is not
    assert first in rep.removed_versions and second in rep.removed_versions
    assert sorted(rep.dropped_tables) == sorted(first_tables)
    assert first_tables.isdisjoint(table_names(lancedb.connect(str(path))))
    assert sum(rep.trimmed_tables.values()) > 0  # build 2's side tables lost their versions before the sync
    # the kept snapshot reads exactly as before: chunks, digests and sentence vectors
    assert read_snapshot(path, synced) == named and _chunks_at(path, synced) == rows
    assert np.array_equal(SentenceVectors(path, synced).lookup_with_cost([SENTENCE])[0][SENTENCE], vector)
    assert latest_snapshot(path) is not None and latest_snapshot(path).chunk_version == latest  # type: ignore[union-attr]
    for gone in (first, second):
        with pytest.raises(CribsheetError, match=f"snapshot of chunk version {gone} .* was reclaimed"):
            read_snapshot(path, gone)


def test_a_compaction_slower_than_any_margin_removes_no_kept_version(tmp_path: Path) -> None:
    """LanceDB's `optimize` compacts, then prunes with a cutoff it computes when the prune starts: a compaction
    that outlasts the margin moves that cutoff past an age computed before it. Here every call that has
    work to do takes a second longer than the margin; the kept snapshot still reads whole."""
    from lancedb.table import LanceTable

    import corpus.reclaim

    path = tmp_path / "idx.lancedb"
    first, second, synced, latest = _four_snapshots(path, pause=corpus.reclaim.MARGIN.total_seconds() + 1)
    kept = _whole(path, synced)
    slow_s = corpus.reclaim.MARGIN.total_seconds() + 1
    real = LanceTable.optimize
    slowed: list[str] = []

    def slow_compaction(self: Any, **kw: Any) -> Any:
        version = self.version
        real(self, cleanup_older_than=KEEP_VERSIONS)  # LanceDB's compaction step, pruning nothing
        if self.version != version:  # it had work to do, and took longer than the margin
            slowed.append(self.name)
            time.sleep(slow_s)
        return real(self, **kw)  # then the call itself: its prune computes its cutoff now

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(LanceTable, "optimize", slow_compaction)
        rep = _reclaim(path, synced)

    assert slowed  # the compaction really was slower than the margin
    assert _whole(path, synced) == kept and _whole(path, latest)[0] == read_snapshot(path)
    assert rep.kept_snapshots == [synced, latest] and {first, second} <= set(rep.removed_versions)


@pytest.fixture
def zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Set the process's time zone (`TZ`, applied by `time.tzset`); the previous one is back afterwards."""

    def use(tz: str) -> None:
        monkeypatch.setenv("TZ", tz)
        time.tzset()

    yield use
    monkeypatch.undo()
    time.tzset()


def _new_york_falling_back_at(instant: int, shift_s: int) -> str:
    """A POSIX time zone with New York's standard time (UTC-5) and a daylight-saving time `shift_s` ahead of
    it, in force from January 1 until epoch second `instant`, when the clocks fall back by `shift_s`."""
    west = 5 * 3600 - shift_s
    wall = dt.datetime.fromtimestamp(instant, dt.UTC).replace(tzinfo=None) - dt.timedelta(seconds=west)
    return f"EST5EDT{west // 3600}:{west % 3600 // 60:02d}:{west % 60:02d},0/0,{wall.timetuple().tm_yday - 1}/{wall:%T}"


@pytest.mark.parametrize("shift_s", [3600, 6], ids=["one-hour", "six-seconds"])
def test_a_daylight_saving_change_between_the_kept_snapshot_and_the_reclaim_removes_no_kept_version(
    tmp_path: Path, zone: Any, shift_s: int
) -> None:
    """The clocks fall back between the kept snapshot's commit and the reclaim (New York's hour, and a
    six-second one that a test can outwait): LanceDB's versions carry naive local times, and their naive
    difference from the local clock is short by the shift."""
    import corpus.reclaim

    margin = corpus.reclaim.MARGIN.total_seconds()
    path = tmp_path / "idx.lancedb"
    build(path)
    first = read_snapshot(path).chunk_version
    time.sleep(margin + 1)
    build(path, rebuild=True)
    kept_version = read_snapshot(path).chunk_version
    build(path, rebuild=True)
    latest = read_snapshot(path).chunk_version
    committed = {int(v["version"]): v["timestamp"].timestamp() for v in open_table(path).list_versions()}
    fall_back = int(committed[kept_version]) + 1
    zone(_new_york_falling_back_at(fall_back, shift_s))
    assert time.localtime(fall_back - 1).tm_isdst == 1 and time.localtime(fall_back).tm_isdst == 0
    # after the change; for the short shift, late enough that a naive age stays positive (an hour's cannot be
    # outwaited: there a naive age is negative)
    ready = fall_back + 0.5 if shift_s >= 3600 else committed[kept_version] + shift_s - margin + 1
    time.sleep(max(0.0, ready - time.time()))
    kept = _whole(path, kept_version)

    rep = _reclaim(path, kept_version)

    assert _whole(path, kept_version) == kept and rep.kept_snapshots == [kept_version, latest]
    assert first in rep.removed_versions


def test_a_snapshot_between_two_kept_ones_stays_whole(tmp_path: Path) -> None:
    """LanceDB's cleanup removes by age, so the chunk versions of a snapshot between two kept ones stay, and
    so do its side tables: it reads whole, not refused half-removed."""
    path = tmp_path / "idx.lancedb"
    versions = _four_snapshots(path, pause=0)
    before = {v: _whole(path, v) for v in versions}

    rep = _reclaim(path, versions[0])

    assert {v: _whole(path, v) for v in versions} == before and not rep.dropped_tables
    assert rep.kept_snapshots == versions and rep.claimed_snapshots == [versions[0]]


def test_the_claims_are_read_under_the_index_lock(tmp_path: Path) -> None:
    """A sweep that stores its run while a reclaim starts is seen: the stores are read with the index locked."""
    path = tmp_path / "idx.lancedb"
    build(path)
    held: list[bool] = []

    def claims() -> list[IndexPin]:
        with pytest.raises(CribsheetError, match="another `cribsheet index` is writing"), writer_lock(path):
            pass
        held.append(True)
        return []

    reclaim_index(path, claims)
    assert held == [True]


def test_a_prune_that_would_reach_a_kept_version_removes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kept versions are tagged: when LanceDB's clock runs past ours by more than the margin, its prune is
    refused whole (nothing removed) instead of removing them."""
    import corpus.reclaim

    path = tmp_path / "idx.lancedb"
    build(path)
    build(path, rebuild=True)
    kept_version = read_snapshot(path).chunk_version
    time.sleep(corpus.reclaim.MARGIN.total_seconds() + 1)
    build(path, rebuild=True)
    before = {int(v["version"]) for v in open_table(path).list_versions()}
    behind = type("Clock", (), {"time": staticmethod(lambda: time.time() - 30.0)})
    monkeypatch.setattr(corpus.reclaim, "time", behind)

    with pytest.raises(CribsheetError, match="would have reached a kept version, so it removed nothing"):
        _reclaim(path, kept_version)

    assert before <= {int(v["version"]) for v in open_table(path).list_versions()}


def test_a_readers_lease_keeps_its_snapshot_and_a_gone_readers_lease_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`train-scorer` and `tune-pruning` write no run row; their lease keeps the snapshot they read. A lease
    whose process is gone is removed, and the next reclaim takes the snapshot (its tag removed first)."""
    monkeypatch.setattr("corpus.reclaim.MARGIN", dt.timedelta(seconds=0.5))
    path = tmp_path / "idx.lancedb"
    build(path)
    first = read_snapshot(path).chunk_version
    time.sleep(1.0)
    build(path, rebuild=True)
    with reader_lease(path, first) as leased:
        rep = reclaim_index(path)
        assert leased.chunk_version == first and rep.claimed_snapshots == [first]
        assert _whole(path, first)[0] == leased
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lease = path / LEASES / "dead.json"
    lease.write_text(
        json.dumps(
            IndexPin.of(leased, "x").model_dump(exclude={"source", "paths"})
            | {"pid": int(gone.stdout), "host": socket.gethostname()}
        )
    )

    rep = reclaim_index(path)

    assert rep.stale_leases == [str(lease)] and not lease.exists() and first in rep.removed_versions
    with (
        pytest.raises(CribsheetError, match=f"snapshot of chunk version {first} .* was reclaimed"),
        reader_lease(path, first),
    ):
        pass


def test_a_sync_removes_no_earlier_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """LanceDB's compaction removes versions older than 7 days by default; a sync asks it to remove none."""
    from corpus import index

    ages: list[object] = []
    original = index._refresh_indices

    def spy(table: object, *args: object, **kwargs: object) -> None:
        real = table.optimize  # type: ignore[attr-defined]

        def optimize(**kw: object) -> object:
            ages.append(kw.get("cleanup_older_than"))
            return real(**kw)

        table.optimize = optimize  # type: ignore[attr-defined]
        original(table, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(index, "_refresh_indices", spy)
    build(tmp_path / "idx.lancedb")
    build(tmp_path / "idx.lancedb", SpanHashEmbedder())  # unchanged: nothing to fold
    assert not ages
    _four_snapshots(tmp_path / "again.lancedb")  # a one-document sync folds its merge into the indices
    assert ages and all(isinstance(a, dt.timedelta) and a >= dt.timedelta(days=3650) for a in ages)


def test_reclaim_refuses_to_keep_nothing_and_an_index_without_snapshots(tmp_path: Path) -> None:
    path = tmp_path / "idx.lancedb"
    build(path)
    with pytest.raises(CribsheetError, match="at least 1"):
        reclaim_index(path, keep_last=0)
    with pytest.raises(CribsheetError, match="no committed snapshot"):
        reclaim_index(tmp_path / "none.lancedb")
    assert not (tmp_path / "none.lancedb").exists()  # nothing made where there was no index
