"""Index snapshots: every table of a build pinned together, an interrupted build invisible and restarted,
the digest over every table, and no table in an index folder outside the snapshot mechanism."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from corpus.chunk import SentenceChunker
from corpus.errors import CribsheetError
from corpus.index import WRITER_LOCK, IndexOptions, open_table, sync_index
from corpus.models import Document
from corpus.retrieve import LanceRetriever, index_identity
from corpus.sentences import SentenceVectors
from corpus.snapshot import (
    CACHE_TABLES,
    SIDE_TABLES,
    commit_snapshot,
    content_digest,
    latest_snapshot,
    open_side_table,
    read_snapshot,
    table_names,
    uncovered_tables,
)
from tests.corpus.test_sentences import SpanHashEmbedder, _guide
from tests.fakes import HashEmbedder

DOCS = [
    Document(id=f"d{i}", title=f"Doc {i}", text=f"Document {i} is about topic {i}. It has a second sentence {i}.")
    for i in range(6)
]
SENTENCE = "Document 1 is about topic 1."


class BreaksAfter(SpanHashEmbedder):
    """Pools spans like SpanHashEmbedder, then fails on its `calls`-th document batch (a killed build)."""

    def __init__(self, calls: int, shift: float = 0.0) -> None:
        super().__init__()
        self.calls, self.shift = calls, shift

    def embed_documents_with_spans(
        self, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]]
    ) -> tuple[np.ndarray, list[list[np.ndarray | None]], float]:
        self.calls -= 1
        if self.calls < 0:
            raise RuntimeError("killed")
        docs, pooled, seconds = super().embed_documents_with_spans(texts, spans)
        return docs, [[None if v is None else v + self.shift for v in row] for row in pooled], seconds


def build(path: Path, embedder: HashEmbedder | None = None, **opts: object) -> None:
    options = IndexOptions(sentence_vectors=True, batch_chunks=1, **opts)  # type: ignore[arg-type]
    sync_index([*DOCS, _guide()], SentenceChunker(), embedder or SpanHashEmbedder(), path, options)


def test_an_interrupted_full_rebuild_leaves_the_previous_build_whole_and_the_next_sync_restarts_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "idx.lancedb"
    build(path)
    before = index_identity(path)
    vector = SentenceVectors(path).lookup_with_cost([SENTENCE])[0][SENTENCE]
    units = SentenceVectors(path).units([_guide().text])
    sentence_rows = SentenceVectors(path).table.count_rows()

    with pytest.raises(RuntimeError, match="killed"):  # after its first batch of side-table rows
        build(path, BreaksAfter(calls=2, shift=1.0), rebuild=True)

    assert index_identity(path) == before
    stored = SentenceVectors(path)
    assert stored.table.count_rows() == sentence_rows
    assert np.array_equal(stored.lookup_with_cost([SENTENCE])[0][SENTENCE], vector)
    assert stored.units([_guide().text]) == units
    assert uncovered_tables(path)  # the interrupted build's partial side tables, named by no snapshot

    report = sync_index(
        [*DOCS, _guide()],
        SentenceChunker(),
        SpanHashEmbedder(),
        path,
        IndexOptions(sentence_vectors=True, batch_chunks=1),
    )
    assert report.rebuilt and report.restarted_build is not None
    assert uncovered_tables(path) == []
    after = index_identity(path)
    assert after.build_id != before.build_id and after.index_sha256 != before.index_sha256
    assert SentenceVectors(path).table.count_rows() == sentence_rows


def test_a_reader_pinned_to_a_chunk_version_reads_the_side_tables_of_that_build(tmp_path: Path) -> None:
    path = tmp_path / "idx.lancedb"
    build(path)
    pinned = index_identity(path).version
    old = SentenceVectors(path, pinned).lookup_with_cost([SENTENCE])[0][SENTENCE]
    build(path, BreaksAfter(calls=10_000, shift=1.0), rebuild=True)  # a rebuild with other vectors commits
    new = SentenceVectors(path).lookup_with_cost([SENTENCE])[0][SENTENCE]
    assert not np.allclose(old, new)
    again = SentenceVectors(path, pinned)
    assert again.chunk_version == pinned and np.array_equal(again.lookup_with_cost([SENTENCE])[0][SENTENCE], old)
    assert LanceRetriever(path, SpanHashEmbedder(), version=pinned).version == pinned
    with pytest.raises(CribsheetError, match="not a committed snapshot"):
        SentenceVectors(path, pinned + 1000)


def test_the_index_digest_covers_every_side_table(tmp_path: Path) -> None:
    import lancedb

    path = tmp_path / "idx.lancedb"
    build(path)
    snapshot = latest_snapshot(path)
    assert snapshot is not None and set(snapshot.tables) == set(SIDE_TABLES)
    db = lancedb.connect(str(path))
    for kind in SIDE_TABLES:
        side = open_side_table(path, snapshot, kind)
        digest = content_digest(side)
        latest = db.open_table(snapshot.tables[kind].name)
        latest.delete(f"key = '{side.to_arrow()['key'][0]}'")  # a side table changed in place
        assert content_digest(latest) != digest
        sides = {k: db.open_table(snapshot.tables[k].name) for k in SIDE_TABLES}
        changed = commit_snapshot(db, open_table(path), sides, snapshot.build_id)
        assert changed.index_sha256 != snapshot.index_sha256 and changed.corpus_sha256 == snapshot.corpus_sha256
        snapshot = changed


def test_every_table_of_an_index_folder_belongs_to_a_snapshot_or_is_a_declared_cache(tmp_path: Path) -> None:
    import lancedb

    from eval.compress.cache import LanceCompressionCache

    path = tmp_path / "idx.lancedb"
    build(path)
    sync_index([*DOCS[:3], _guide()], SentenceChunker(), SpanHashEmbedder(), path, IndexOptions(sentence_vectors=True))
    LanceCompressionCache(path)  # the compression cache lives in the index folder too
    db = lancedb.connect(str(path))
    names = set(table_names(db))
    assert names & CACHE_TABLES and uncovered_tables(path) == []
    # Every side kind is named by the snapshot: a side table written another way would be left uncovered.
    assert set(read_snapshot(path).tables) == set(SIDE_TABLES)
    db.create_table("sentences_extra", data=[{"key": "k"}])
    assert uncovered_tables(path) == ["sentences_extra"]


def test_an_index_without_snapshots_is_named_and_rebuilt(tmp_path: Path) -> None:
    import lancedb

    path = tmp_path / "idx.lancedb"
    build(path)
    lancedb.connect(str(path)).drop_table("snapshots")  # as an index written before snapshots existed
    with pytest.raises(CribsheetError, match="before snapshots"):
        LanceRetriever(path, SpanHashEmbedder())
    report = sync_index(DOCS, SentenceChunker(), SpanHashEmbedder(), path, IndexOptions(sentence_vectors=True))
    assert report.rebuilt and read_snapshot(path).chunk_version == report.version


def test_a_second_writer_is_refused(tmp_path: Path) -> None:
    from filelock import FileLock

    path = tmp_path / "idx.lancedb"
    build(path)
    with FileLock(str(path / WRITER_LOCK)), pytest.raises(CribsheetError, match="another `cribsheet index`"):
        build(path)


def test_the_digests_a_sync_keeps_are_those_of_the_whole_index(tmp_path: Path) -> None:
    """A sync updates the snapshot's digest sums with what it writes and removes, without reading the rest
    of the index: after documents are added, changed and deleted, with sentence vectors and units shared
    between chunks, the kept digests equal the ones read from the tables whole."""
    from corpus.snapshot import Ledger, latest_ledger, latest_snapshot, open_side_table

    path = tmp_path / "idx.lancedb"
    opts = IndexOptions(sentence_vectors=True, batch_chunks=2)
    shared = "Both documents end with this sentence."
    docs = [*DOCS, _guide(), Document(id="x", title="X", text=f"The first text. {shared}")]
    steps = [
        docs,
        [*docs, Document(id="y", title="Y", text=f"Another one. {shared}")],  # added
        [*docs[:2], Document(id=docs[2].id, title=docs[2].title, text="Rewritten entirely."), *docs[3:]],
        docs[1:],  # deleted
    ]
    for corpus in steps:
        sync_index(corpus, SentenceChunker(), SpanHashEmbedder(), path, opts)
        snap = latest_snapshot(path)
        kept = latest_ledger(path)
        assert snap is not None and kept is not None
        sides = {kind: open_side_table(path, snap, kind) for kind in snap.tables}
        whole = Ledger.of_tables(open_table(path), sides)
        assert (kept.chunks, kept.corpus, kept.sides) == (whole.chunks, whole.corpus, whole.sides)
    assert kept.sides and all(kept.sides.values())  # both side tables were summed


def test_a_sync_killed_half_way_leaves_the_next_one_digests_of_the_whole_index(tmp_path: Path) -> None:
    """A sync that dies after writing some batches (rows no snapshot names, in none of its digest sums): the
    next sync starts from the committed snapshot's tables, so its kept digests are still the whole index's."""
    from corpus.snapshot import Ledger, latest_ledger, open_side_table

    path = tmp_path / "idx.lancedb"
    opts = IndexOptions(sentence_vectors=True, batch_chunks=1)
    sync_index([*DOCS, _guide()], SentenceChunker(), SpanHashEmbedder(), path, opts)
    committed = read_snapshot(path).chunk_version
    edited = [Document(id=d.id, title=d.title, text=d.text + " Edited tonight, sentence two.") for d in DOCS]
    with pytest.raises(RuntimeError, match="killed"):
        sync_index([*edited, _guide()], SentenceChunker(), BreaksAfter(calls=3), path, opts)
    assert open_table(path).version > committed and read_snapshot(path).chunk_version == committed
    report = sync_index([*edited, _guide()], SentenceChunker(), SpanHashEmbedder(), path, opts)
    assert report.changed == len(DOCS)
    snap, kept = read_snapshot(path), latest_ledger(path)
    assert kept is not None
    whole = Ledger.of_tables(open_table(path), {kind: open_side_table(path, snap, kind) for kind in snap.tables})
    assert (kept.chunks, kept.corpus, kept.sides) == (whole.chunks, whole.corpus, whole.sides)
