"""What keeps a sync proportional to what changed (review #9): the `doc_id` BTree a sync's reads and deletes
use, side rows appended once per key, and every index folded by the one `fold_fraction` rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from corpus import index_tables
from corpus.chunk import SentenceChunker
from corpus.index import IndexOptions, open_table, sync_index
from corpus.index_tables import _sql_list, add_side_rows
from corpus.models import Document
from corpus.sentences import SENTENCE_TABLE, UNIT_TABLE
from corpus.snapshot import latest_snapshot, open_side_table
from tests.fakes import HashEmbedder

SHARED = "Every guide ends with the same closing line."


def _doc(i: int, night: int = 0) -> Document:
    """A document with an outline (so it has unit rows), one sentence it shares with every other document
    (a key repeated within and across batches) and, from `night` on, an edit of its own."""
    heading = f"Guide {i}"
    body = f"Topic {i} is explained here. {SHARED}"
    if night:
        body += f" Night {night} revised topic {i}."
    text = f"{heading}\n\n{body}"
    return Document(
        id=f"d{i:03d}",
        title=heading,
        text=text,
        outline=[(0, len(heading), "heading"), (len(heading) + 2, len(text), "text")],
    )


def _index(path: Path, docs: list[Document], **options: Any) -> Any:
    opts = IndexOptions(sentence_vectors=True, batch_chunks=7, **options)  # several batches a sync
    return sync_index(docs, SentenceChunker(), HashEmbedder(), path, opts)


def _index_on(table: Any, column: str) -> Any:
    found = [ix for ix in table.list_indices() if column in ix.columns]
    assert found, f"no index on {column}: {table.list_indices()}"
    return found[0]


def _sides(path: Path) -> dict[str, Any]:
    snapshot = latest_snapshot(path)
    assert snapshot is not None
    return {kind: open_side_table(path, snapshot, kind) for kind in (SENTENCE_TABLE, UNIT_TABLE)}


def test_a_build_indexes_doc_id_and_a_sync_reads_changed_documents_through_it(tmp_path: Path) -> None:
    """A sync's `doc_id IN (...)` read and delete go through a BTree created with the table, not a scan of the
    whole column."""
    path = tmp_path / "idx.lancedb"
    _index(path, [_doc(i) for i in range(60)])
    table = open_table(path)
    assert _index_on(table, "doc_id").index_type == "BTree"
    read = table.search().where(f"doc_id IN ({_sql_list(['d007', 'd031'])})").select(["chunk_id"]).limit(100)
    plan = read.analyze_plan()
    assert "ScalarIndexQuery" in plan and "doc_id" in plan, plan


def test_an_index_from_before_the_doc_id_btree_gets_one_at_its_next_writing_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "idx.lancedb"
    docs = [_doc(i) for i in range(20)]
    real = index_tables._has_index_on
    monkeypatch.setattr(index_tables, "_has_index_on", lambda table, column: column == "doc_id" or real(table, column))
    _index(path, docs)  # built as before the BTree came in
    assert not [ix for ix in open_table(path).list_indices() if "doc_id" in ix.columns]
    monkeypatch.undo()
    _index(path, docs)  # nothing changed: nothing written, no index built
    assert not [ix for ix in open_table(path).list_indices() if "doc_id" in ix.columns]
    _index(path, [_doc(0, night=1), *docs[1:]])
    assert _index_on(open_table(path), "doc_id").index_type == "BTree"


def test_every_index_is_folded_by_fold_fraction_side_tables_included(tmp_path: Path) -> None:
    """A sync below `fold_fraction` leaves its rows to a scan; one past it folds them into the chunk table's
    indices (`doc_id` too) and into each side table's `key` BTree, which was once built and never refreshed."""
    path = tmp_path / "idx.lancedb"
    docs = [_doc(i) for i in range(60)]
    _index(path, docs, fold_fraction=0.1)
    _index(path, [_doc(0, night=1), *docs[1:]], fold_fraction=0.1)  # 1 of 60 changed: below the fold
    assert _index_on(open_table(path), "doc_id").num_unindexed_rows
    assert _index_on(_sides(path)[SENTENCE_TABLE], "key").num_unindexed_rows

    churned = [_doc(i, night=2) if i % 3 == 0 else _doc(i, night=1 if i == 0 else 0) for i in range(60)]
    report = _index(path, churned, fold_fraction=0.1)  # 20 of 60 changed, with new sentences: past it
    assert report.changed == 20
    table = open_table(path)
    assert _index_on(table, "doc_id").num_unindexed_rows == 0
    assert _index_on(table, "content").num_unindexed_rows == 0
    for kind, side in _sides(path).items():
        assert side.count_rows() > 60, kind
        assert _index_on(side, "key").num_unindexed_rows == 0, kind


def test_side_tables_hold_each_key_once_across_batches_and_syncs(tmp_path: Path) -> None:
    """Side rows are appended, not merged on `key`: what keeps a key from being stored twice is
    `new_side_rows` (within a batch, against earlier batches, against earlier syncs, after a document is
    deleted and comes back). Each table's rows equal its distinct keys after every sync."""
    path = tmp_path / "idx.lancedb"
    nights = [
        [_doc(i) for i in range(30)],
        [_doc(i, night=1 if i < 10 else 0) for i in range(30)],  # changed, the shared sentence again
        [_doc(i, night=1 if i < 10 else 0) for i in range(20)],  # ten deleted
        [_doc(i, night=1 if i < 10 else 0) for i in range(30)],  # and back, with sentences still stored
        [_doc(i, night=3) for i in range(30)],
    ]
    for night, docs in enumerate(nights):
        _index(path, docs)
        for kind, side in _sides(path).items():
            keys = side.search().select(["key"]).limit(side.count_rows()).to_arrow().column("key").to_pylist()
            assert len(keys) == len(set(keys)) > 0, (night, kind)
    assert latest_snapshot(path) is not None


def test_add_side_rows_filters_against_a_stored_table_it_was_not_handed(tmp_path: Path) -> None:
    """A caller without the table object (None) still gets only the new keys appended, never a second copy."""
    import lancedb

    db = lancedb.connect(str(tmp_path / "db"))
    name = f"{SENTENCE_TABLE}-b1"
    stored = pa.table({"key": ["a", "b"], "seconds": [1.0, 2.0]})
    db.create_table(name, data=stored)
    table, fresh = add_side_rows(db, None, pa.table({"key": ["b", "c", "c"], "seconds": [9.0, 3.0, 4.0]}), name)
    assert fresh.column("key").to_pylist() == ["c"]
    rows = table.to_arrow().sort_by("key")
    assert rows.column("key").to_pylist() == ["a", "b", "c"]
    assert rows.column("seconds").to_pylist() == [1.0, 2.0, 3.0]  # a stored key keeps its row


@pytest.mark.parametrize("kind", [SENTENCE_TABLE, UNIT_TABLE])
def test_a_full_build_creates_each_side_tables_key_index(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "idx.lancedb"
    _index(path, [_doc(i) for i in range(20)])
    assert _index_on(_sides(path)[kind], "key").index_type == "BTree"
