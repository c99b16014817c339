"""Retrieval over the LanceDB index: vector, full-text, or hybrid with reciprocal rank fusion."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, NamedTuple, Protocol, get_args

from corpus.embed import Embedder
from corpus.errors import CribsheetError
from corpus.index import IndexSpec, open_table, read_spec
from corpus.models import Hit
from corpus.snapshot import read_snapshot

RetrievalMode = Literal["hybrid", "vector", "fts"]
RETRIEVAL_MODES: tuple[str, ...] = get_args(RetrievalMode)
_COLUMNS = ["chunk_id", "doc_id", "title", "text", "section", "vector"]


class Retriever(Protocol):
    """Returns the top-n chunks for a question, best first."""

    def retrieve(self, question: str, n: int, mode: RetrievalMode = "hybrid") -> list[Hit]:
        """The `n` best chunks for `question` by `mode`."""
        ...


class IndexIdentity(NamedTuple):
    """What a sweep read: the pinned snapshot's chunk table version, the digest of its documents (the gate
    compares runs on the same documents) and the digest of the index itself (build spec, build id, chunks and
    every side table of the snapshot: what reuse keys on).
    """

    version: int
    corpus_sha256: str
    index_sha256: str
    build_id: str


def index_identity(path: Path, version: int | None = None) -> IndexIdentity:
    """The identity of the index at `path`: of its committed snapshot at chunk `version` (the latest when
    None), read from the snapshot's record (computed once, at commit), without loading any model or reading
    the chunks (a Ray driver only needs this).
    """
    snapshot = read_snapshot(path, version)
    return IndexIdentity(snapshot.chunk_version, snapshot.corpus_sha256, snapshot.index_sha256, snapshot.build_id)


class LanceRetriever:
    """Retriever over an index written by `corpus.index.sync_index`, pinned to one table version.

    Pinning gives a sweep a consistent snapshot even while a nightly re-index commits new versions: the
    latest committed snapshot's chunk version when `version` is None, never a build still being written.
    """

    def __init__(self, path: Path, embedder: Embedder, version: int | None = None) -> None:
        snapshot = read_snapshot(path, version)
        self.spec: IndexSpec = read_spec(path, snapshot.chunk_version)
        if (self.spec.embedder, self.spec.dim) != (embedder.name, embedder.dim):
            raise CribsheetError(
                f"{path}: index was built with embedder '{self.spec.embedder}' ({self.spec.dim}-d) but the "
                f"query embedder is '{embedder.name}' ({embedder.dim}-d); re-index or use the same embedder"
            )
        weights = getattr(embedder, "weights", None)
        if self.spec.embedder_weights != weights:
            raise CribsheetError(
                f"{path}: index was built with other weights of embedder '{embedder.name}' "
                f"({self.spec.embedder_weights} vs {weights} now); re-index with `cribsheet index`"
            )
        self.table = open_table(path, snapshot.chunk_version)
        self.version: int = snapshot.chunk_version
        self.embedder = embedder
        self._corpus_sha256 = snapshot.corpus_sha256

    def corpus_digest(self) -> str:
        """sha256 over the (document id, content hash) pairs of the pinned version."""
        return self._corpus_sha256

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
        import numpy as np

        return [
            Hit(
                chunk_id=r["chunk_id"],
                doc_id=r["doc_id"],
                title=r["title"],
                text=r["text"],
                section=r.get("section") or "",
                score=sign * float(r[key]),
                vector=np.asarray(r["vector"], dtype=np.float32).tobytes(),
            )
            for r in rows
        ]
