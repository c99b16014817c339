"""The table steps of an index sync (`corpus.index`): the digest ledger it starts from and keeps in step, a
batch's chunks replaced and its new side rows appended, the tables put back to the committed snapshot, orphan
side tables dropped, and the indices (full-text, vector, the `doc_id` and side-table `key` BTrees) built or
folded in by one rule, `fold_fraction`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from corpus.index_batch import EmbeddedBatch
from corpus.known_docs import KnownDocs
from corpus.sentences import SENTENCE_TABLE, UNIT_TABLE
from corpus.snapshot import (
    IndexSnapshot,
    Ledger,
    chunk_rows_sum,
    corpus_pairs_sum,
    latest_ledger,
    open_side_table,
    table_names,
    uncovered_tables,
)
from corpus.table import IndexOptions

KEEP_VERSIONS = dt.timedelta(days=36_500)
"""A sync's compaction removes no earlier version (LanceDB's default removes those older than 7 days, which a
stored run may still name): only `cribsheet reclaim` (`corpus.reclaim`) removes versions."""


def _sql_list(values: Iterable[str]) -> str:
    return ", ".join("'" + v.replace("'", "''") + "'" for v in values)


def _drop_orphans(db: Any, path: Path) -> None:
    """Side tables no committed snapshot names (left by an interrupted full build)."""
    for name in uncovered_tables(path):
        if name.partition("-")[0] in (SENTENCE_TABLE, UNIT_TABLE):
            db.drop_table(name)


def _ledger(path: Path, table: Any, current: Any) -> Ledger:
    """The digest sums of the committed snapshot a sync starts from: stored with it, or (a snapshot from
    before ledgers) read from its tables once.
    """
    stored = latest_ledger(path)
    if stored is not None:
        return stored
    sides = {kind: open_side_table(path, current, kind) for kind in current.tables}
    return Ledger.of_tables(table, sides)


def _forget(ledger: Ledger, table: Any, doc_ids: list[str], existing: KnownDocs) -> None:
    """Take the chunks of `doc_ids` (about to be replaced or deleted) out of the digest sums: one filtered
    read of those documents' chunks, not of the index.
    """
    if not doc_ids:
        return
    old = table.search().where(f"doc_id IN ({_sql_list(doc_ids)})").select(["chunk_id", "text"])
    ledger.add("chunks", chunk_rows_sum(old.limit(max(table.count_rows(), 1)).to_arrow()), sign=-1)
    ledger.add("corpus", corpus_pairs_sum((d, existing.hash_of(d)) for d in doc_ids), sign=-1)


def new_side_rows(table: Any, rows: Any) -> Any:
    """The rows of a batch whose key the side table does not hold yet (and, of keys the batch repeats, the
    first): what a content-addressed insert adds, so the digest sums count exactly the rows stored.
    """
    import pyarrow as pa

    keys = rows.column("key").to_pylist()
    first = sorted({k: i for i, k in reversed(list(enumerate(keys)))}.values())
    if len(first) < len(keys):
        rows = rows.take(pa.array(first, type=pa.int64()))
        keys = [keys[i] for i in first]
    if table is None or not keys:
        return rows
    held: set[str] = set()
    for i in range(0, len(keys), 500):
        part = keys[i : i + 500]
        found = table.search().where(f"key IN ({_sql_list(part)})").select(["key"]).limit(len(part) * 4).to_arrow()
        held |= set(found.column("key").to_pylist())
    if not held:
        return rows
    return rows.take(pa.array([i for i, k in enumerate(keys) if k not in held], type=pa.int64()))


def add_side_rows(db: Any, table: Any, rows: Any, name: str) -> tuple[Any, Any]:
    """A batch's rows into the content-addressed side table `name` of one build (`sentences-<build>`: vectors;
    `units-<build>`: a chunk's units), created on first use: the table, and the rows added, which are the
    batch's `new_side_rows` against it. So every key it appends is new and a plain append keeps one row a
    key (no merge on `key`, which joins the batch against the whole table); a key already stored keeps its
    row (a sentence shared by two chunks keeps its first chunk's vector, in a full build as in a sync).
    """
    if table is None and name in table_names(db):
        table = db.open_table(name)  # filter against what is stored, however the caller came to lack it
    fresh = new_side_rows(table, rows)
    if not fresh.num_rows:
        return table, fresh
    if table is None:
        return db.create_table(name, data=fresh), fresh
    table.add(fresh)
    return table, fresh


def _restore(db: Any, table: Any, current: IndexSnapshot) -> None:
    """Put the chunk table and the build's side tables back to the committed snapshot's versions when a sync
    that never committed (killed) wrote after it: its rows are in no snapshot and in none of the snapshot's
    digest sums, so this sync starts from exactly what the snapshot names (and redoes that work).
    """
    if int(table.version) != current.chunk_version:
        table.restore(current.chunk_version)
    for ref in current.tables.values():
        side = db.open_table(ref.name)
        if int(side.version) != ref.version:
            side.restore(ref.version)


def _replace(table: Any, done: EmbeddedBatch, existing: KnownDocs) -> int:
    """A batch's new chunks in, the old chunks of its changed documents out: a delete filtered on those
    documents and an append (LanceDB's merge with a delete of rows not matched by the source scans the whole
    table). The delete finds its rows through the `doc_id` BTree plus a scan of the rows the BTree does not
    cover yet (those written since the last fold, at most about `fold_fraction` of the table); an index from
    before the BTree scans the `doc_id` column until its next sync that writes creates it. Two commits,
    neither named by a snapshot until the sync's last step, and undone by `_restore` when the sync dies
    between them.
    """
    replaced = [doc.id for doc, _ in done.batch if doc.id in existing]
    for i in range(0, len(replaced), 500):
        table.delete(f"doc_id IN ({_sql_list(replaced[i : i + 500])})")
    table.add(done.data)
    return int(done.data.num_rows)


def _refresh_indices(table: Any, n_chunks: int, opts: IndexOptions, compact: bool = True) -> None:
    """Full-text, `doc_id` BTree and (past `ann_threshold`) vector indices, each created when missing;
    `compact` folds merged batches into the indices and compacts their fragments, by `_needs_optimize` (a
    fresh table, written in one stream, has nothing to fold or compact).
    """
    names = {str(getattr(ix, "index_type", "")) for ix in table.list_indices()}
    if "FTS" not in names:
        from lancedb.index import FTS

        table.create_index("content", config=FTS(), replace=True)
    if not _has_index_on(table, "doc_id"):
        from lancedb.index import BTree

        # a sync's reads and deletes of changed documents (`doc_id IN (...)`) then touch those documents'
        # rows and the unfolded ones, not the whole column; a document has few chunks, so a BTree (a bitmap
        # suits columns of few distinct values)
        table.create_index("doc_id", config=BTree(), replace=True)
    if n_chunks >= opts.ann_threshold and not _has_vector_index(table):
        from lancedb import index as kinds

        config = {
            "IVF_PQ": kinds.IvfPq,
            "IVF_FLAT": kinds.IvfFlat,
            "IVF_SQ": kinds.IvfSq,
            "HNSW_PQ": kinds.HnswPq,
            "HNSW_SQ": kinds.HnswSq,
        }[opts.ann_index_type](distance_type="cosine")
        table.create_index("vector", config=config, replace=True)
    if compact and _needs_optimize(table, n_chunks, opts):
        # folds new rows into the FTS/ANN indices and compacts small fragments; removes no version
        table.optimize(cleanup_older_than=KEEP_VERSIONS)


def _refresh_side_indices(sides: Iterable[Any], opts: IndexOptions) -> None:
    """The `key` BTree of each side table a sync or build wrote, by the chunk table's rule: compacted and
    folded (`optimize`) once `_needs_optimize` says so, then the BTree created if missing. Lookups
    (`new_side_rows`, the `pruned` compressor's `SentenceVectors`) scan only the rows the BTree does not
    cover, so their share stays under about `fold_fraction` instead of growing night after night until a
    rebuild.
    """
    for side in sides:
        if side is None:
            continue
        if _needs_optimize(side, side.count_rows(), opts):  # removes no version, like the chunk table's fold
            side.optimize(cleanup_older_than=KEEP_VERSIONS)
        if not _has_index_on(side, "key"):
            from lancedb.index import BTree

            side.create_index("key", config=BTree(), replace=True)


def _needs_optimize(table: Any, n_chunks: int, opts: IndexOptions) -> bool:
    """Whether a sync folds its rows into the indices now: when the rows some index does not cover, or the
    small fragments, pass `opts.fold_fraction` of the table's `n_chunks` rows (searches and filtered reads
    scan unindexed rows meanwhile, so results are the same). A nightly sync of a few documents then costs
    what it wrote, not a pass over the whole index. The same rule for the chunk table and the side tables.
    """
    unindexed = max((getattr(ix, "num_unindexed_rows", 0) or 0 for ix in table.list_indices()), default=0)
    small = int(table.stats()["fragment_stats"]["num_small_fragments"])
    return unindexed > opts.fold_fraction * n_chunks or small > max(32, opts.fold_fraction * 1000)


def _has_vector_index(table: Any) -> bool:
    return _has_index_on(table, "vector")


def _has_index_on(table: Any, column: str) -> bool:
    return any(column in getattr(ix, "columns", []) for ix in table.list_indices())
