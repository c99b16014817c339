"""Index snapshots: every table of one index build, pinned together, committed as one unit.

An index folder holds the chunk table and the *side tables* of each build (sentence vectors and units, named
by build id: `sentences-<build>`). A build or sync writes its tables first and commits last: one appended row
of the `snapshots` table names the chunk table's version, each side table's name and version, and the digest
of their content. A reader opens a snapshot (the latest, or the one of a pinned chunk version) and gets every
table of it at its recorded version, so a rebuild or sync running meanwhile, or one that crashed half-way, is
invisible to it: nothing it writes is named by a committed snapshot until its last step. A side table is never
overwritten (a full build writes new ones under its own build id), so the previous build stays whole.

Which tables are side tables is declared here (`SIDE_TABLES`) and nowhere else; the tables of an index folder
that belong to no snapshot are only the ones declared as caches (`CACHE_TABLES`, keyed by their own inputs).
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from corpus.digests import MODULUS, Ledger, chunk_rows_sum, content_digest, corpus_pairs_sum, side_rows_sum
from corpus.errors import CribsheetError
from corpus.table import BUILD_KEY, SPEC_KEY, TABLE, IndexSpec, open_table

__all__ = [  # the row digests and the Ledger moved to corpus.digests; importable from here as before
    "CACHE_TABLES",
    "MODULUS",
    "SIDE_TABLES",
    "SNAPSHOT_TABLE",
    "IndexSnapshot",
    "Ledger",
    "TableRef",
    "chunk_digest",
    "chunk_rows_sum",
    "commit_snapshot",
    "content_digest",
    "corpus_pairs_sum",
    "latest_ledger",
    "latest_snapshot",
    "missing_tables",
    "open_side_table",
    "read_snapshot",
    "read_spec",
    "side_rows_sum",
    "side_table_name",
    "table_digest",
    "table_names",
    "uncovered_tables",
]

SNAPSHOT_TABLE = "snapshots"
SIDE_TABLES: tuple[str, ...] = ("sentences", "units")
"""Kinds of side table a build writes beside its chunks; each is content-addressed by a `key` column."""
CACHE_TABLES: frozenset[str] = frozenset({"compressions_v2"})
"""Tables an index folder may hold outside every snapshot: caches keyed by their own inputs (the compression
cache's key names the compressor, its model's weights and the passage text), never read as index state."""


class TableRef(BaseModel):
    """One side table of a snapshot: its name and the version the snapshot pins."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    version: int


class IndexSnapshot(BaseModel):
    """Every table of one committed state of an index, and the digests a run keys on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    chunk_version: int
    """Version of the chunk table (what `index_version` names in a run)."""
    build_id: str
    """New on every full build, kept by incremental syncs."""
    tables: dict[str, TableRef]
    """Side tables by kind (`sentences`, `units`); absent: the build has none."""
    index_sha256: str
    """sha256 over the build spec, the build id, every chunk and every row of every side table."""
    corpus_sha256: str
    """sha256 over the (document id, content hash) pairs of the chunk table: what the gate compares on."""


def table_names(db: Any) -> list[str]:
    """Every table of a LanceDB connection (all pages of its listing)."""
    names: list[str] = []
    token: str | None = None
    while True:
        page = db.list_tables(page_token=token)
        names.extend(page.tables)
        token = page.page_token
        if not token:
            return names


def side_table_name(kind: str, build_id: str) -> str:
    """The name of a build's side table of `kind` (a full build never overwrites the previous build's)."""
    if kind not in SIDE_TABLES:
        raise CribsheetError(f"unknown side table kind '{kind}'; known: {', '.join(SIDE_TABLES)}")
    return f"{kind}-{build_id}" if build_id else kind


def table_digest(table: Any) -> str:
    """sha256 over the (document id, content hash) pairs of a chunk table at its checked-out version."""
    n = table.count_rows()
    rows = table.search().select(["doc_id", "doc_hash"]).limit(max(n, 1)).to_arrow()
    pairs = sorted(set(zip(rows.column("doc_id").to_pylist(), rows.column("doc_hash").to_pylist(), strict=True)))
    h = hashlib.sha256()
    for doc_id, doc_hash in pairs:
        h.update(f"{doc_id}\x1f{doc_hash}\x1e".encode())
    return h.hexdigest()


def chunk_digest(table: Any) -> str:
    """sha256 over what a reader of a chunk table at its checked-out version gets: the build spec, the build
    id (new on every full build) and every chunk (id and text).
    """
    meta = table.schema.metadata or {}
    h = hashlib.sha256(meta.get(SPEC_KEY, b"") + b"\x1e" + meta.get(BUILD_KEY, b"") + b"\x1e")
    n = table.count_rows()
    rows = table.search().select(["chunk_id", "text"]).limit(max(n, 1)).to_arrow()
    for chunk_id, text in sorted(
        zip(rows.column("chunk_id").to_pylist(), rows.column("text").to_pylist(), strict=True)
    ):
        h.update(f"{chunk_id}\x1f{hashlib.sha256(text.encode()).hexdigest()}\x1e".encode())
    return h.hexdigest()


def _snapshot_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("chunk_version", pa.int64()),
            pa.field("build_id", pa.string()),
            pa.field("tables", pa.string()),
            pa.field("index_sha256", pa.string()),
            pa.field("corpus_sha256", pa.string()),
            pa.field("committed_utc", pa.string()),
            pa.field("sums", pa.string()),
        ]
    )


def commit_snapshot(
    db: Any, chunks: Any, sides: dict[str, Any], build_id: str, ledger: Ledger | None = None
) -> IndexSnapshot:
    """Record the current versions of the chunk table `chunks` and of the side tables `sides` (by kind) as
    one snapshot, with their digests: the build's last step, after which readers see it. One LanceDB append:
    it happens whole or not at all. `ledger`: the digest sums the sync kept as it wrote (None: read from the
    tables, whole); they are stored with the snapshot for the next sync.
    """
    import pyarrow as pa

    unknown = set(sides) - set(SIDE_TABLES)
    if unknown:
        raise CribsheetError(f"side tables {sorted(unknown)} are not declared in corpus.snapshot.SIDE_TABLES")
    refs = {kind: TableRef(name=t.name, version=int(t.version)) for kind, t in sorted(sides.items()) if t is not None}
    ledger = ledger if ledger is not None else Ledger.of_tables(chunks, sides)
    meta = chunks.schema.metadata or {}
    h = hashlib.sha256(meta.get(SPEC_KEY, b"") + b"\x1e" + meta.get(BUILD_KEY, b"") + b"\x1e")
    h.update(f"chunks\x1f{ledger.chunks:064x}".encode())
    for kind in refs:
        h.update(f"\x1e{kind}\x1f{ledger.sides.get(kind, 0):064x}".encode())
    snapshot = IndexSnapshot(
        chunk_version=int(chunks.version),
        build_id=build_id,
        tables=refs,
        index_sha256=h.hexdigest(),
        corpus_sha256=f"{ledger.corpus:064x}",
    )
    row = pa.Table.from_pylist(
        [
            {
                "chunk_version": snapshot.chunk_version,
                "build_id": build_id,
                "tables": json.dumps({k: v.model_dump() for k, v in refs.items()}, sort_keys=True),
                "index_sha256": snapshot.index_sha256,
                "corpus_sha256": snapshot.corpus_sha256,
                "committed_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "sums": ledger.dumps(),
            }
        ],
        schema=_snapshot_schema(),
    )
    if SNAPSHOT_TABLE in table_names(db):
        table = db.open_table(SNAPSHOT_TABLE)
        if "sums" not in table.schema.names:  # a snapshot table from before ledgers: the column appended
            table.add_columns({"sums": "CAST(NULL AS STRING)"})
        table.add(row)
    else:
        db.create_table(SNAPSHOT_TABLE, data=row, schema=_snapshot_schema())
    return snapshot


def _snapshot_rows(path: Path) -> list[dict[str, Any]] | None:
    """Every committed snapshot row of the index at `path`, oldest first; None when the folder has no
    snapshot table (no index, or one written before snapshots existed).
    """
    import lancedb

    if not Path(path).exists():
        return None
    db = lancedb.connect(str(path))
    if SNAPSHOT_TABLE not in table_names(db):
        return None
    rows = db.open_table(SNAPSHOT_TABLE).to_arrow().to_pylist()
    return sorted(rows, key=lambda r: (r["chunk_version"], r["committed_utc"]))


def _from_row(row: dict[str, Any]) -> IndexSnapshot:
    tables = {k: TableRef(**v) for k, v in json.loads(row["tables"]).items()}
    return IndexSnapshot(
        chunk_version=row["chunk_version"],
        build_id=row["build_id"],
        tables=tables,
        index_sha256=row["index_sha256"],
        corpus_sha256=row["corpus_sha256"],
    )


def latest_ledger(path: Path) -> Ledger | None:
    """The digest sums stored with the latest snapshot (None: no snapshot, or one from before ledgers)."""
    rows = _snapshot_rows(path)
    return Ledger.loads(rows[-1]["sums"]) if rows and rows[-1].get("sums") else None


def latest_snapshot(path: Path) -> IndexSnapshot | None:
    """The last committed snapshot of the index at `path`, or None (no index, or one from before snapshots)."""
    rows = _snapshot_rows(path)
    return _from_row(rows[-1]) if rows else None


def read_snapshot(path: Path, version: int | None = None) -> IndexSnapshot:
    """The committed snapshot of the index at `path` whose chunk table is at `version` (the latest when None),
    with a clear error when there is none.
    """
    open_table(path)  # a missing folder or chunk table is named as such
    rows = _snapshot_rows(path)
    if not rows:
        raise CribsheetError(
            f"{path}: index written before snapshots (or its first build never finished); "
            "run `cribsheet index` on it again (it rebuilds)"
        )
    if version is None:
        return _from_row(rows[-1])
    for row in reversed(rows):
        if row["chunk_version"] == version:
            snapshot = _from_row(row)
            gone = missing_tables(path, snapshot)
            if gone:
                raise CribsheetError(
                    f"{path}: snapshot of chunk version {version} (build {snapshot.build_id or 'first'}, committed "
                    f"{row['committed_utc']}) was reclaimed ({', '.join(gone)} gone); "
                    f"use the latest snapshot (chunk version {rows[-1]['chunk_version']}) instead"
                )
            return snapshot
    committed = ", ".join(str(r["chunk_version"]) for r in rows[-5:])
    raise CribsheetError(
        f"{path}: chunk table version {version} is not a committed snapshot (a build in progress or interrupted?); "
        f"the latest committed: {committed}"
    )


def missing_tables(path: Path, snapshot: IndexSnapshot) -> list[str]:
    """The tables of `snapshot` (chunk table and side tables, each at its pinned version) that are no longer in
    the index folder at `path`: empty for a whole snapshot; a reclaimed one (`corpus.reclaim`) names what went.
    """
    import lancedb

    db = lancedb.connect(str(path))
    present = set(table_names(db))
    gone: list[str] = []
    for name, version in [(TABLE, snapshot.chunk_version), *((r.name, r.version) for r in snapshot.tables.values())]:
        if name not in present:
            gone.append(f"table {name}")
        elif version not in {int(v["version"]) for v in db.open_table(name).list_versions()}:
            gone.append(f"{name} version {version}")
    return gone


def open_side_table(path: Path, snapshot: IndexSnapshot, kind: str) -> Any:
    """The side table of `kind` of `snapshot`, checked out at its pinned version; None when it has none."""
    import lancedb

    ref = snapshot.tables.get(kind)
    if ref is None:
        return None
    table = lancedb.connect(str(path)).open_table(ref.name)
    table.checkout(ref.version)
    return table


def uncovered_tables(path: Path) -> list[str]:
    """Tables of the index folder at `path` that no committed snapshot names and that are not declared
    caches: whatever a build wrote outside the snapshot mechanism (or left behind when it was interrupted).
    """
    import lancedb

    named = {TABLE, SNAPSHOT_TABLE, *CACHE_TABLES}
    for row in _snapshot_rows(path) or []:
        named |= {ref.name for ref in _from_row(row).tables.values()}
    return sorted(set(table_names(lancedb.connect(str(path)))) - named)


def read_spec(path: Path, version: int | None = None) -> IndexSpec:
    """Read the build spec of the index at `path`: of its chunk table at `version`, else of the latest
    committed snapshot (a build in progress is not read), else of the chunk table's latest version.
    """
    if version is None:
        snapshot = latest_snapshot(path)
        version = snapshot.chunk_version if snapshot is not None else None
    table = open_table(path, version)
    meta = table.schema.metadata or {}
    if SPEC_KEY not in meta:
        raise CribsheetError(f"{path}: table '{TABLE}' has no cribsheet build spec; rebuild it with `cribsheet index`")
    try:
        return IndexSpec.model_validate(json.loads(meta[SPEC_KEY]))
    except ValueError:
        raise CribsheetError(f"{path}: index written by another cribsheet version; rebuild with --rebuild") from None
