"""The LanceDB chunk index: incremental sync, build spec in the table's metadata, consistent versions.

The table steps a sync takes (replace a batch, restore, the digest ledger, the search indices) are in
`corpus.index_tables`.
"""

from __future__ import annotations

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
from corpus.index_tables import KEEP_VERSIONS as KEEP_VERSIONS
from corpus.index_tables import _drop_orphans as _drop_orphans
from corpus.index_tables import _forget as _forget
from corpus.index_tables import _has_vector_index as _has_vector_index
from corpus.index_tables import _ledger as _ledger
from corpus.index_tables import _needs_optimize as _needs_optimize
from corpus.index_tables import _refresh_indices as _refresh_indices
from corpus.index_tables import _refresh_side_indices as _refresh_side_indices
from corpus.index_tables import _replace as _replace
from corpus.index_tables import _restore as _restore
from corpus.index_tables import _sql_list as _sql_list
from corpus.index_tables import add_side_rows
from corpus.index_tables import new_side_rows as new_side_rows
from corpus.known_docs import KnownDocs
from corpus.models import Document
from corpus.runtime import release_memory
from corpus.sentences import SENTENCE_TABLE, UNIT_TABLE, can_pool_sentences
from corpus.snapshot import (
    IndexSnapshot,
    Ledger,
    chunk_rows_sum,
    commit_snapshot,
    corpus_pairs_sum,
    latest_snapshot,
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

__all__ = [
    "KEEP_VERSIONS",
    "REPORT_FILE",
    "SPEC_KEY",
    "TABLE",
    "IndexConfig",
    "IndexOptions",
    "IndexReport",
    "IndexSpec",
    "document_coverage",
    "indexed_text",
    "new_side_rows",
    "open_table",
    "read_spec",
    "sync_index",
]


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
    sides: dict[str, Any] = {kind: db.open_table(n) if n in existing_tables else None for kind, n in names.items()}
    wrote_sides = False
    # The digest sums of the snapshot, updated with what this sync writes and removes (O(what changed)).
    ledger = Ledger() if full or table is None else _ledger(path, table, current)

    def embedded() -> Iterator[EmbeddedBatch]:
        """Each embedded batch, its coverage counted and its sentence vectors stored."""
        nonlocal wrote_sides
        for done in pool.map(batches()):
            for c in done.coverage:
                words["parser"] += c.parser_words
                words["indexed"] += c.indexed_words
                if c.coverage < opts.min_coverage:
                    low.append(c)
            # side tables before the chunks they belong to: no committed chunk lacks its sentences
            for kind, rows in ((SENTENCE_TABLE, done.sentences), (UNIT_TABLE, done.units)):
                if rows is not None and rows.num_rows:
                    sides[kind], fresh = add_side_rows(db, sides[kind], rows, names[kind])
                    if fresh.num_rows:
                        ledger.add(kind, side_rows_sum(fresh))
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
            _refresh_side_indices(sides.values(), opts)
    if full or current is None or int(table.version) != current.chunk_version or wrote_sides:
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
