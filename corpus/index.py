"""The LanceDB chunk index: incremental sync, build spec in the table's metadata, consistent versions."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from corpus.chunk import Chunker
from corpus.cluster import RayOptions
from corpus.embed import Embedder
from corpus.errors import CribsheetError
from corpus.index_batch import Batch, BatchPool, EmbeddedBatch, LocalBatches, RayBatches, document_coverage
from corpus.known_docs import KnownDocs
from corpus.models import Document
from corpus.runtime import release_memory
from corpus.sentences import SENTENCE_TABLE, UNIT_TABLE, add_sentences, can_pool_sentences
from corpus.snapshot import (
    IndexSnapshot,
    Ledger,
    chunk_rows_sum,
    commit_snapshot,
    corpus_pairs_sum,
    latest_ledger,
    latest_snapshot,
    open_side_table,
    read_spec,
    side_rows_sum,
    side_table_name,
    table_names,
    uncovered_tables,
)
from corpus.sources import Skipped
from corpus.table import (
    BUILD_KEY,
    REPORT_FILE,
    SPEC_KEY,
    TABLE,
    DocCoverage,
    IndexConfig,
    IndexOptions,
    IndexReport,
    IndexSpec,
    indexed_text,
    open_table,
    rebuild_reasons,
    rules_version,
    table_schema,
    write_fresh,
)

WRITER_LOCK = ".cribsheet-writer.lock"
KEEP_VERSIONS = dt.timedelta(days=36_500)
"""A sync's compaction removes no earlier version (LanceDB's default removes those older than 7 days, which a
stored run may still name): only `cribsheet reclaim` (`corpus.reclaim`) removes versions."""

__all__ = [
    "REPORT_FILE",
    "SPEC_KEY",
    "TABLE",
    "IndexConfig",
    "IndexOptions",
    "IndexReport",
    "IndexSpec",
    "document_coverage",
    "indexed_text",
    "open_table",
    "read_spec",
    "sync_index",
]


def _sql_list(values: Iterable[str]) -> str:
    return ", ".join("'" + v.replace("'", "''") + "'" for v in values)


def sync_index(
    docs: Iterable[Document],
    chunker: Chunker,
    embedder: Embedder,
    path: Path,
    options: IndexOptions | None = None,
    progress: Callable[[int, int], None] | None = None,
    skipped: Sequence[Skipped] = (),
    extractors: dict[str, str] | None = None,
    ray: RayOptions | None = None,
    embedder_ref: str | None = None,
) -> IndexReport:
    """Bring the index at `path` in line with `docs`: embed only new or changed documents, drop deleted ones.

    Every table a build writes (chunks, and with sentence vectors the `sentences-<build>` and `units-<build>` side
    tables) is committed together by one last step, a snapshot (`corpus.snapshot`): readers open the latest
    committed snapshot or a pinned one, never a table half-written. A first build (or a changed embedder/chunker,
    `rebuild`, or a full build that was interrupted) streams every batch into one write of a new version of the
    chunk table, with a new build id and side tables of its own: the previous build stays whole and readable (a
    sweep pinned to it finishes on it) until `cribsheet reclaim` removes the builds no kept snapshot needs (a sync
    itself removes no version), and version numbers never restart. An incremental sync removes each batch's changed
    documents' old chunks by a filtered delete and appends their new ones (no snapshot names either commit until
    the last step); a crash leaves the last committed snapshot as it was, and the next sync restores the tables to
    it and picks up where it stopped. One writer at a time: a
    second `sync_index` on the same folder is refused while the first holds its lock. With `ray`, batches are
    chunked and embedded on Ray workers (each with its own embedder, built from its registered name `embedder_ref`)
    and written here as they return.
    """
    opts = options or IndexOptions()
    spec = IndexSpec(
        embedder=embedder.name,
        dim=embedder.dim,
        embedder_weights=getattr(embedder, "weights", None),
        chunker=chunker.config.model_dump(),
        precision=getattr(embedder, "precision", "float32"),
        extractors=extractors or {},
        sentence_vectors=opts.sentence_vectors,
        sentence_pooling=(
            ("contextual" if can_pool_sentences(embedder) else "isolated") if opts.sentence_vectors else None
        ),
        sentence_units="structure" if opts.sentence_vectors else None,
        rules=rules_version(),
    )
    started = time.perf_counter()
    path = Path(path)
    created = not path.exists()
    with writer_lock(path):
        current = latest_snapshot(path)
        interrupted = _interrupted_build(path, current)
        existing = _existing_spec(path, current)
        full = opts.rebuild or current is None or interrupted is not None or existing != spec
        reasons = rebuild_reasons(existing, spec) + (["--rebuild"] if opts.rebuild else [])
        build_id = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}" if full else ""
        try:
            if ray is not None and embedder_ref is None:
                raise CribsheetError("indexing on Ray needs the embedder's registered name (embedder_ref)")
            pool: BatchPool = (
                RayBatches(ray, embedder_ref or "", chunker.config, spec)
                if ray
                else LocalBatches(chunker, embedder, spec)
            )
            report = _sync(docs, pool, path, spec, opts, progress, build_id or (current.build_id if current else ""))
        except NoDocumentsError as exc:
            if created and path.exists():
                shutil.rmtree(path, ignore_errors=True)
            raise CribsheetError(_nothing_usable(str(exc), path, skipped)) from None
        except BaseException:
            if created and path.exists():  # a first build that failed leaves no half-written folder behind
                shutil.rmtree(path, ignore_errors=True)
            raise
    report = report.model_copy(
        update={
            "path": str(path),
            "seconds": time.perf_counter() - started,
            "skipped": list(skipped),
            "restarted_build": interrupted,
            "rebuild_reasons": reasons if full else [],
        }
    )
    (path / REPORT_FILE).write_text(report.model_dump_json(indent=2))
    return report


@contextmanager
def writer_lock(path: Path) -> Iterator[None]:
    """The index folder's writer lock (a file inside it): a second writer is refused at once, folder named."""
    from filelock import FileLock, Timeout

    path.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path / WRITER_LOCK), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise CribsheetError(
            f"{path}: another `cribsheet index` is writing this index (lock {lock.lock_file}); wait for it to finish"
        ) from None
    try:
        yield
    finally:
        lock.release()


class NoDocumentsError(CribsheetError):
    """Every input was skipped."""


def _nothing_usable(message: str, path: Path, skipped: Sequence[Skipped]) -> str:
    """One line: what was skipped by kind, the first reasons, and where the whole skip list was written."""
    report = path.with_name(f"{path.name}.skipped.json")
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps([s.model_dump() for s in skipped], indent=1))
    kinds = Counter(s.kind for s in skipped)
    counts = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items())) or "nothing read"
    first = "; ".join(f"{s.source}: {s.reason}" for s in skipped[:3])
    return f"{message} ({counts}{'; first: ' + first if first else ''}); every skipped input: {report}"


def _existing_spec(path: Path, snapshot: IndexSnapshot | None) -> IndexSpec | None:
    if snapshot is None:
        return None
    try:
        return read_spec(path, snapshot.chunk_version)
    except CribsheetError:
        return None


def _interrupted_build(path: Path, snapshot: IndexSnapshot | None) -> str | None:
    """The build id of a full build that wrote the chunk table or side tables but never committed its
    snapshot (killed, or failed after its write): the next sync restarts it as a full build, since its
    side tables may be partial. None when there is none.
    """
    if snapshot is None or not path.exists():
        return None
    latest = str((open_table(path).schema.metadata or {}).get(BUILD_KEY, b"").decode())
    if latest and latest != snapshot.build_id:
        return latest
    orphans = [name for name in uncovered_tables(path) if name.partition("-")[0] in (SENTENCE_TABLE, UNIT_TABLE)]
    return orphans[0].partition("-")[2] if orphans else None


def _drop_orphans(db: Any, path: Path) -> None:
    """Side tables no committed snapshot names (left by an interrupted full build)."""
    for name in uncovered_tables(path):
        if name.partition("-")[0] in (SENTENCE_TABLE, UNIT_TABLE):
            db.drop_table(name)


def _sync(
    docs: Iterable[Document],
    pool: BatchPool,
    path: Path,
    spec: IndexSpec,
    opts: IndexOptions,
    progress: Callable[[int, int], None] | None,
    build_id: str,
) -> IndexReport:
    """Write the batches of a full build (`pool` has no committed snapshot of this `build_id`) or of an
    incremental sync of the committed build `build_id`, then commit the snapshot.
    """
    import lancedb

    db = lancedb.connect(str(path))
    current = latest_snapshot(path)
    full = current is None or current.build_id != build_id
    if full and path.exists():
        _drop_orphans(db, path)
    schema = table_schema(spec, build_id)
    table = None if full else db.open_table(TABLE)
    if table is not None and current is not None:
        _restore(db, table, current)
    existing = KnownDocs() if table is None else KnownDocs.of_table(table)
    counts: dict[str, int] = {"added": 0, "changed": 0, "unchanged": 0, "chunks_written": 0}
    low: list[DocCoverage] = []  # only the documents below min_coverage are kept: memory stays flat
    words = {"parser": 0, "indexed": 0}

    def looked_up() -> Iterator[tuple[Document, str | None]]:
        """Each document of the stream with the hash the index holds for it, looked up a block at a time."""
        block: list[Document] = []
        for doc in docs:
            block.append(doc)
            if len(block) == 4096:
                yield from zip(block, existing.see_many([d.id for d in block]), strict=True)
                block = []
        yield from zip(block, existing.see_many([d.id for d in block]), strict=True)

    def batches() -> Iterator[Batch]:
        pending: Batch = []
        pending_chunks = 0
        for n, (doc, old) in enumerate(looked_up(), start=1):
            digest = doc.content_hash()
            if old == digest:
                counts["unchanged"] += 1
            else:
                counts["added" if old is None else "changed"] += 1
                pending.append((doc, digest))
                pending_chunks += 1 + len(doc.text) // 1000  # rough: flush by size, not only by count
                if pending_chunks >= opts.batch_chunks:
                    yield pending
                    pending, pending_chunks = [], 0
            if progress and n % 100 == 0:
                progress(n, 0)
        if pending:
            yield pending

    names = {kind: side_table_name(kind, build_id) for kind in (SENTENCE_TABLE, UNIT_TABLE)}
    existing_tables = set(table_names(db))
    sentences: Any = db.open_table(names[SENTENCE_TABLE]) if names[SENTENCE_TABLE] in existing_tables else None
    units: Any = db.open_table(names[UNIT_TABLE]) if names[UNIT_TABLE] in existing_tables else None
    wrote_sides = False
    # The digest sums of the snapshot, updated with what this sync writes and removes (O(what changed)).
    ledger = Ledger() if full or table is None else _ledger(path, table, current)

    def embedded() -> Iterator[EmbeddedBatch]:
        """Each embedded batch, its coverage counted and its sentence vectors stored."""
        nonlocal sentences, units, wrote_sides
        for done in pool.map(batches()):
            for c in done.coverage:
                words["parser"] += c.parser_words
                words["indexed"] += c.indexed_words
                if c.coverage < opts.min_coverage:
                    low.append(c)
            # side tables before the chunks they belong to: no committed chunk lacks its sentences
            if done.sentences is not None and done.sentences.num_rows:
                fresh = new_side_rows(sentences, done.sentences)
                if fresh.num_rows:
                    ledger.add(SENTENCE_TABLE, side_rows_sum(fresh))
                    sentences = add_sentences(db, sentences, fresh, names[SENTENCE_TABLE])
                    wrote_sides = True
            if done.units is not None and done.units.num_rows:
                fresh = new_side_rows(units, done.units)
                if fresh.num_rows:
                    ledger.add(UNIT_TABLE, side_rows_sum(fresh))
                    units = add_sentences(db, units, fresh, names[UNIT_TABLE])
                    wrote_sides = True
            ledger.add("chunks", chunk_rows_sum(done.data))
            ledger.add("corpus", corpus_pairs_sum((doc.id, digest) for doc, digest in done.batch))
            counts["chunks_written"] += done.data.num_rows
            yield done
            release_memory()

    if table is None:  # a fresh table, streamed in one write: no merge, no small fragments to compact later
        table = write_fresh(db, TABLE, schema, (done.data for done in embedded()))
    else:
        for done in embedded():
            _forget(ledger, table, [doc.id for doc, _ in done.batch if doc.id in existing], existing)
            _replace(table, done, existing)
    gone = existing.gone()
    for i in range(0, len(gone), 500):
        _forget(ledger, table, gone[i : i + 500], existing)
        table.delete(f"doc_id IN ({_sql_list(gone[i : i + 500])})")
    if progress:
        progress(existing.n_seen, existing.n_seen)
    if not existing.n_seen:
        raise NoDocumentsError("the corpus has no usable documents")
    n_chunks = table.count_rows()
    if full or counts["added"] or counts["changed"] or gone:
        _refresh_indices(table, n_chunks, opts, compact=not full)
        if wrote_sides:
            from lancedb.index import BTree

            for side in (sentences, units):  # lookups stay fast as the tables grow
                if side is not None and not any("key" in getattr(i, "columns", []) for i in side.list_indices()):
                    # built once; rows added later are found by a scan of the unindexed fragments, so a nightly
                    # sync never rebuilds it over the whole table
                    side.create_index("key", config=BTree(), replace=True)
    if full or current is None or int(table.version) != current.chunk_version or wrote_sides:
        sides = {SENTENCE_TABLE: sentences, UNIT_TABLE: units}
        current = commit_snapshot(db, table, sides, build_id, ledger)
    has_ann = _has_vector_index(table)
    low.sort(key=lambda c: (c.coverage, c.doc_id))
    return IndexReport(
        parser_words=words["parser"],
        indexed_words=words["indexed"],
        low_coverage=low,
        path=str(path),
        spec=spec,
        version=current.chunk_version,
        seconds=0.0,
        rebuilt=full,
        deleted=len(gone),
        n_documents=existing.n_seen,
        n_chunks=n_chunks,
        ann_index=has_ann,
        added=counts["added"],
        changed=counts["changed"],
        unchanged=counts["unchanged"],
        chunks_written=counts["chunks_written"],
    )


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
    documents and an append, each reading only what it touches (LanceDB's merge with a delete of rows not
    matched by the source scans the whole table). Two commits, neither named by a snapshot until the sync's
    last step, and undone by `_restore` when the sync dies between them.
    """
    replaced = [doc.id for doc, _ in done.batch if doc.id in existing]
    for i in range(0, len(replaced), 500):
        table.delete(f"doc_id IN ({_sql_list(replaced[i : i + 500])})")
    table.add(done.data)
    return int(done.data.num_rows)


def _refresh_indices(table: Any, n_chunks: int, opts: IndexOptions, compact: bool = True) -> None:
    """Full-text and (past `ann_threshold`) vector indices; `compact` folds merged batches into the indices and
    compacts their fragments (a fresh table, written in one stream, has nothing to fold or compact).
    """
    names = {str(getattr(ix, "index_type", "")) for ix in table.list_indices()}
    if "FTS" not in names:
        from lancedb.index import FTS

        table.create_index("content", config=FTS(), replace=True)
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


def _needs_optimize(table: Any, n_chunks: int, opts: IndexOptions) -> bool:
    """Whether a sync folds its rows into the indices now: when the rows no index covers, or the small
    fragments, pass `opts.fold_fraction` of the table (searches read unindexed rows by a scan meanwhile, so
    results are the same). A nightly sync of a few documents then costs what it wrote, not a pass over the
    whole index.
    """
    unindexed = max((getattr(ix, "num_unindexed_rows", 0) or 0 for ix in table.list_indices()), default=0)
    small = int(table.stats()["fragment_stats"]["num_small_fragments"])
    return unindexed > opts.fold_fraction * n_chunks or small > max(32, opts.fold_fraction * 1000)


def _has_vector_index(table: Any) -> bool:
    return any("vector" in getattr(ix, "columns", []) for ix in table.list_indices())
