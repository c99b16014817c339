"""Retrieval over the LanceDB index: vector, full-text, or hybrid with reciprocal rank fusion."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Protocol

from corpus.embed import Embedder
from corpus.errors import CribsheetError
from corpus.index import IndexSpec, open_table, read_spec
from corpus.models import Hit

RetrievalMode = Literal["hybrid", "vector", "fts"]


class Retriever(Protocol):
    """Returns the top-n chunks for a question, best first."""

    def retrieve(self, question: str, n: int) -> list[Hit]: ...


class LanceRetriever:
    """Retriever over an index built by `corpus.index.build_index`."""

    def __init__(self, path: Path, embedder: Embedder, mode: RetrievalMode = "hybrid") -> None:
        self.spec: IndexSpec = read_spec(path)
        if (self.spec.embedder, self.spec.dim) != (embedder.name, embedder.dim):
            raise CribsheetError(
                f"{path}: index was built with embedder '{self.spec.embedder}' ({self.spec.dim}-d) but the "
                f"query embedder is '{embedder.name}' ({embedder.dim}-d); re-index or use the same embedder"
            )
        self.table = open_table(path)
        self.version: int = self.table.version
        self.embedder = embedder
        self.mode = mode

    def retrieve(self, question: str, n: int) -> list[Hit]:
        from lancedb.rerankers import RRFReranker

        cols = ["chunk_id", "doc_id", "title", "text"]
        if self.mode == "vector":
            q = self.table.search(self.embedder.embed_query(question).tolist()).select(cols).limit(n)
            rows, key, sign = q.to_list(), "_distance", -1.0
        elif self.mode == "fts":
            q = self.table.search(question, query_type="fts").select(cols).limit(n)
            rows, key, sign = q.to_list(), "_score", 1.0
        else:
            q = (
                self.table.search(query_type="hybrid")
                .vector(self.embedder.embed_query(question).tolist())
                .text(question)
                .select(cols)
                .rerank(RRFReranker())
                .limit(n)
            )
            rows, key, sign = q.to_list(), "_relevance_score", 1.0
        return [
            Hit(
                chunk_id=r["chunk_id"], doc_id=r["doc_id"], title=r["title"], text=r["text"], score=sign * float(r[key])
            )
            for r in rows
        ]
