"""Rerankers behind one Protocol, registered by name."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from corpus.embed import Embedder
from corpus.errors import CribsheetError
from corpus.index import indexed_text
from corpus.models import Chunk, Hit


class Reranker(Protocol):
    """Reorders candidate hits for a question, best first."""

    name: str

    def rerank(self, question: str, hits: Sequence[Hit]) -> list[Hit]: ...


def _as_text(hit: Hit) -> str:
    return indexed_text(Chunk(id=hit.chunk_id, doc_id=hit.doc_id, title=hit.title, position=0, text=hit.text))


class DenseReranker:
    """Reorders by cosine similarity of the question and passage embeddings (undoes fusion noise)."""

    name = "dense"

    def __init__(self, embedder: Embedder, **_: Any) -> None:
        self.embedder = embedder
        self.calls = 0

    def rerank(self, question: str, hits: Sequence[Hit]) -> list[Hit]:
        self.calls += 1
        if not hits:
            return []
        q = self.embedder.embed_query(question)
        scores = self.embedder.embed_documents([_as_text(h) for h in hits]) @ q
        order = np.argsort(-scores, kind="stable")
        return [hits[i].model_copy(update={"score": float(scores[i])}) for i in order]


class CrossEncoderReranker:
    """A sentence-transformers `CrossEncoder` from a local folder or hub id (e.g. bge-reranker on GPU)."""

    name = "cross-encoder"

    def __init__(self, model: str, device: str | None = None, **_: Any) -> None:
        from sentence_transformers import CrossEncoder  # heavy: keep inside the adapter

        self.model = CrossEncoder(model, device=device)
        self.calls = 0

    def rerank(self, question: str, hits: Sequence[Hit]) -> list[Hit]:
        self.calls += 1
        if not hits:
            return []
        scores = np.asarray(self.model.predict([(question, _as_text(h)) for h in hits]), dtype=float)
        order = np.argsort(-scores, kind="stable")
        return [hits[i].model_copy(update={"score": float(scores[i])}) for i in order]


class RetrievalOrder:
    """Keeps the retriever's order: the no-rerank baseline."""

    name = "none"

    def __init__(self, **_: Any) -> None:
        self.calls = 0

    def rerank(self, question: str, hits: Sequence[Hit]) -> list[Hit]:
        self.calls += 1
        return list(hits)


RERANKERS: dict[str, Callable[..., Reranker]] = {
    "dense": DenseReranker,
    "cross-encoder": CrossEncoderReranker,
    "none": RetrievalOrder,
}


def build_reranker(name: str, **kwargs: Any) -> Reranker:
    """Build a registered reranker by name."""
    try:
        return RERANKERS[name](**kwargs)
    except KeyError:
        raise CribsheetError(f"unknown reranker '{name}'; known: {', '.join(sorted(RERANKERS))}") from None
