"""Writing and opening the LanceDB chunk index; the build spec lives in the table's metadata."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from corpus.chunk import Chunker
from corpus.embed import Embedder
from corpus.errors import CribsheetError
from corpus.models import Chunk, Document

TABLE = "chunks"
SPEC_KEY = b"cribsheet.index_spec"


class IndexSpec(BaseModel):
    """How an index was built; a query with a different embedder is refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    embedder: str
    dim: int
    chunker: dict[str, object]
    corpus_sha256: str
    """sha256 over the ids and texts of the documents, in order."""
    n_documents: int
    n_chunks: int


class IndexReport(BaseModel):
    """What `build_index` did."""

    path: str
    spec: IndexSpec
    seconds: float
    version: int
    reused: bool = False
    """True when an index with the same spec (corpus hash, embedder, chunker) was already in place."""


def corpus_digest(docs: Sequence[Document]) -> str:
    """Content hash of a corpus, recorded in the index and in every run that reads it."""
    h = hashlib.sha256()
    for d in docs:
        h.update(f"{d.id}\x1f{d.title}\x1f{d.text}\x1e".encode())
    return h.hexdigest()


def indexed_text(chunk: Chunk) -> str:
    """What is embedded and full-text indexed: the title makes a chunk self-describing."""
    return f"{chunk.title}\n{chunk.text}" if chunk.title else chunk.text


def build_index(
    docs: Sequence[Document],
    chunker: Chunker,
    embedder: Embedder,
    path: Path,
    batch_size: int = 2048,
    progress: Callable[[int, int], None] | None = None,
    rebuild: bool = False,
) -> IndexReport:
    """Chunk, embed and write a fresh LanceDB index at `path`, replacing any old one only on success.

    The table is written into a sibling temporary folder and moved into place at the end, so a
    crash or bad input leaves the previous index (or nothing) behind, never a half table. An index
    already built from the same corpus with the same embedder and chunker is kept unless `rebuild`.
    """
    import lancedb  # heavy: keep inside
    import pyarrow as pa

    started = time.perf_counter()
    chunks = list(chunker.chunk(docs))
    if not chunks:
        raise CribsheetError("the corpus produced no chunks")
    spec = IndexSpec(
        embedder=embedder.name,
        dim=embedder.dim,
        chunker=chunker.config.model_dump(),
        corpus_sha256=corpus_digest(docs),
        n_documents=len(docs),
        n_chunks=len(chunks),
    )
    schema = pa.schema(
        [
            pa.field("chunk_id", pa.string()),
            pa.field("doc_id", pa.string()),
            pa.field("title", pa.string()),
            pa.field("position", pa.int32()),
            pa.field("text", pa.string()),
            pa.field("content", pa.string()),
            pa.field("vector", pa.list_(pa.float32(), embedder.dim)),
        ],
        metadata={SPEC_KEY: spec.model_dump_json().encode()},
    )
    path = Path(path)
    if not rebuild and path.exists():
        try:
            if read_spec(path) == spec:
                version = open_table(path).version
                return IndexReport(
                    path=str(path), spec=spec, seconds=time.perf_counter() - started, version=version, reused=True
                )
        except CribsheetError:
            pass  # unreadable or foreign: rebuild it
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        db = lancedb.connect(str(tmp))
        table = db.create_table(TABLE, schema=schema)
        for start in range(0, len(chunks), batch_size):
            batch = chunks[start : start + batch_size]
            texts = [indexed_text(c) for c in batch]
            vectors = embedder.embed_documents(texts)
            table.add(
                pa.Table.from_pydict(
                    {
                        "chunk_id": [c.id for c in batch],
                        "doc_id": [c.doc_id for c in batch],
                        "title": [c.title for c in batch],
                        "position": [c.position for c in batch],
                        "text": [c.text for c in batch],
                        "content": texts,
                        "vector": [v.astype("float32").tolist() for v in vectors],
                    },
                    schema=schema,
                )
            )
            if progress:
                progress(min(start + batch_size, len(chunks)), len(chunks))
        table.create_fts_index("content", use_tantivy=False, replace=True)
        version = table.version
        _swap_into_place(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return IndexReport(path=str(path), spec=spec, seconds=time.perf_counter() - started, version=version)


def _swap_into_place(tmp: Path, path: Path) -> None:
    old = path.with_name(f".{path.name}.old-{uuid.uuid4().hex[:8]}")
    if path.exists():
        path.rename(old)
    tmp.rename(path)
    if old.exists():
        shutil.rmtree(old, ignore_errors=True)


def read_spec(path: Path) -> IndexSpec:
    """Read the build spec of the index at `path`."""
    table = open_table(path)
    meta = table.schema.metadata or {}
    if SPEC_KEY not in meta:
        raise CribsheetError(f"{path}: table '{TABLE}' has no cribsheet build spec; rebuild it with `cribsheet index`")
    return IndexSpec.model_validate(json.loads(meta[SPEC_KEY]))


def open_table(path: Path):  # type: ignore[no-untyped-def]
    """Open the chunk table at `path` with a clear error when there is none."""
    import lancedb

    path = Path(path)
    if not path.exists():
        raise CribsheetError(f"{path}: no index here; build one with `cribsheet index`")
    db = lancedb.connect(str(path))
    try:
        return db.open_table(TABLE)
    except (ValueError, FileNotFoundError) as exc:
        raise CribsheetError(f"{path}: no table '{TABLE}' ({exc}); rebuild with `cribsheet index`") from None
