"""Retrieval over the LanceDB index: vector, full-text, or hybrid with reciprocal rank fusion."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Literal, NamedTuple, Protocol, get_args

from corpus.embed import Embedder
from corpus.errors import CribsheetError
from corpus.index import IndexSpec, open_table, read_spec
from corpus.models import Hit
from corpus.table import BUILD_KEY, SPEC_KEY

RetrievalMode = Literal["hybrid", "vector", "fts"]
RETRIEVAL_MODES: tuple[str, ...] = get_args(RetrievalMode)
_COLUMNS = ["chunk_id", "doc_id", "title", "text", "section", "vector"]


class Retriever(Protocol):
    """Returns the top-n chunks for a question, best first."""

    def retrieve(self, question: str, n: int, mode: RetrievalMode = "hybrid") -> list[Hit]:
        """The `n` best chunks for `question` by `mode`."""
        ...


def table_digest(table: Any) -> str:
    """sha256 over the (document id, content hash) pairs of a chunk table at its checked-out version."""
    n = table.count_rows()
    rows = table.search().select(["doc_id", "doc_hash"]).limit(max(n, 1)).to_arrow()
    pairs = sorted(set(zip(rows.column("doc_id").to_pylist(), rows.column("doc_hash").to_pylist(), strict=True)))
    h = hashlib.sha256()
    for doc_id, doc_hash in pairs:
        h.update(f"{doc_id}\x1f{doc_hash}\x1e".encode())
    return h.hexdigest()


def index_digest(table: Any) -> str:
    """sha256 over what a reader of a chunk table at its checked-out version gets: the build spec, the build
    id (new on every full build) and every chunk (id and text). Another chunker, embedder precision,
    extractor version or sentence-vector option, or a rebuild of any kind, gives another digest.
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


class IndexIdentity(NamedTuple):
    """What a sweep read: the pinned table version, the digest of its documents (the gate compares runs on
    the same documents) and the digest of the index itself (build spec, build id, chunks: what reuse keys on).
    """

    version: int
    corpus_sha256: str
    index_sha256: str
    build_id: str


def index_identity(path: Path, version: int | None = None) -> IndexIdentity:
    """The identity of the index at `path` pinned at `version` (the latest when None), without loading any
    model (a Ray driver only needs this).
    """
    table = open_table(path)
    pinned = version if version is not None else int(table.version)
    table.checkout(pinned)
    build = (table.schema.metadata or {}).get(BUILD_KEY, b"").decode()
    return IndexIdentity(pinned, table_digest(table), index_digest(table), build)


class LanceRetriever:
    """Retriever over an index written by `corpus.index.sync_index`, pinned to one table version.

    Pinning gives a sweep a consistent snapshot even while a nightly re-index commits new versions.
    """

    def __init__(self, path: Path, embedder: Embedder, version: int | None = None) -> None:
        self.spec: IndexSpec = read_spec(path)
        if (self.spec.embedder, self.spec.dim) != (embedder.name, embedder.dim):
            raise CribsheetError(
                f"{path}: index was built with embedder '{self.spec.embedder}' ({self.spec.dim}-d) but the "
                f"query embedder is '{embedder.name}' ({embedder.dim}-d); re-index or use the same embedder"
            )
        self.table = open_table(path)
        self.version: int = version if version is not None else self.table.version
        self.table.checkout(self.version)
        self.embedder = embedder

    def corpus_digest(self) -> str:
        """sha256 over the (document id, content hash) pairs of the pinned version."""
        return table_digest(self.table)

    def retrieve(self, question: str, n: int, mode: RetrievalMode = "hybrid") -> list[Hit]:
        """The `n` best chunks: vector, full-text, or both fused by reciprocal rank."""
        from lancedb.rerankers import RRFReranker

        if mode == "vector":
            q = self.table.search(self.embedder.embed_query(question).tolist()).select([*_COLUMNS, "_distance"])
            rows, key, sign = q.limit(n).to_list(), "_distance", -1.0
        elif mode == "fts":
            q = self.table.search(question, query_type="fts").select([*_COLUMNS, "_score"])
            rows, key, sign = q.limit(n).to_list(), "_score", 1.0
        elif mode == "hybrid":
            q = (
                self.table.search(query_type="hybrid")
                .vector(self.embedder.embed_query(question).tolist())
                .text(question)
                .select(_COLUMNS)
                .rerank(RRFReranker())
            )
            rows, key, sign = q.limit(n).to_list(), "_relevance_score", 1.0
        else:
            raise CribsheetError(f"unknown retrieval mode '{mode}'; known: {', '.join(RETRIEVAL_MODES)}")
        return [
            Hit(
                chunk_id=r["chunk_id"],
                doc_id=r["doc_id"],
                title=r["title"],
                text=r["text"],
                section=r.get("section") or "",
                score=sign * float(r[key]),
                vector=tuple(r["vector"]),
            )
            for r in rows
        ]
