"""Reclaiming old builds: what no kept snapshot needs goes (chunk versions and side tables together), a kept
snapshot reads exactly as before, and a reclaimed one is refused by name."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import numpy as np
import pytest

from corpus.chunk import SentenceChunker
from corpus.errors import CribsheetError
from corpus.index import IndexOptions, open_table, sync_index
from corpus.models import Document
from corpus.reclaim import reclaim_index
from corpus.sentences import SentenceVectors
from corpus.snapshot import latest_snapshot, read_snapshot, table_names
from tests.corpus.test_sentences import SpanHashEmbedder, _guide
from tests.corpus.test_snapshot import DOCS, SENTENCE, build


def _chunks_at(path: Path, version: int) -> list[dict[str, object]]:
    rows = open_table(path, version).to_arrow().drop_columns(["vector"]).to_pylist()
    return sorted(rows, key=lambda r: str(r["chunk_id"]))


def _four_snapshots(path: Path) -> list[int]:
    """Build 1, build 2, a one-document sync of build 2 (a second later), build 3: their chunk versions."""
    versions = []
    build(path)
    versions.append(read_snapshot(path).chunk_version)
    build(path, rebuild=True)
    versions.append(read_snapshot(path).chunk_version)
    time.sleep(1.0)  # LanceDB removes by age: the kept snapshot stands clear of the ones before it
    edited = [*DOCS[:-1], Document(id=DOCS[-1].id, title="Doc 5", text="Document 5 was edited tonight."), _guide()]
    sync_index(edited, SentenceChunker(), SpanHashEmbedder(), path, IndexOptions(sentence_vectors=True, batch_chunks=1))
    versions.append(read_snapshot(path).chunk_version)
    build(path, rebuild=True)
    versions.append(read_snapshot(path).chunk_version)
    return versions


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

    rep = reclaim_index(path, keep_versions={synced, 10_000})

    assert rep.kept_snapshots == [synced, latest] and rep.unknown_versions == [10_000]
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
