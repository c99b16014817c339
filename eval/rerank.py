"""Rerankers behind one Protocol, registered by name."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from corpus.embed import Embedder, load_sentence_model, query_cosines
from corpus.errors import CribsheetError
from corpus.index import indexed_text
from corpus.models import Chunk, Hit
from corpus.registry import NoConfig, Registry
from eval.engine.generator import TokenScorer


class Reranker(Protocol):
    """Reorders candidate hits for a question, best first."""

    name: str

    def rerank(self, question: str, hits: Sequence[Hit]) -> list[Hit]:
        """`hits` reordered for `question`, best first, with their new scores."""
        ...


@dataclass
class RerankerDeps:
    """The live objects a reranker factory may use."""

    embedder: Embedder | None = None
    scorer: TokenScorer | None = None
    """The vLLM engine, for rerankers that score with the generator LM."""


RERANKERS: Registry[Reranker, RerankerDeps] = Registry("reranker")
"""Registered rerankers; `Setting.reranker` names one (`cross-encoder:PATH`, `bi-encoder:PATH` carry their model)."""


def _as_text(hit: Hit) -> str:
    chunk = Chunk(id=hit.chunk_id, doc_id=hit.doc_id, title=hit.title, position=0, text=hit.text, section=hit.section)
    return indexed_text(chunk)


class DenseReranker:
    """Reorders by cosine similarity of the question and passage embeddings (undoes fusion noise).

    Passage vectors come from the index when the hits carry them (the index stores the same embedder's
    vector of the same text; a retriever refuses another embedder), so reranking embeds only the question.
    """

    name = "dense"

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self.calls = 0

    def rerank(self, question: str, hits: Sequence[Hit]) -> list[Hit]:
        """Reorder by cosine of question and passage vectors."""
        self.calls += 1
        if not hits:
            return []
        q = self.embedder.embed_query(question)
        scores = self._passage_vectors(hits) @ q
        order = np.argsort(-scores, kind="stable")
        return [hits[i].model_copy(update={"score": float(scores[i])}) for i in order]

    def _passage_vectors(self, hits: Sequence[Hit]) -> Any:
        vectors = [h.embedding for h in hits]
        if all(v is not None and len(v) == self.embedder.dim for v in vectors):
            stored = np.stack(vectors)
            return stored / np.maximum(np.linalg.norm(stored, axis=1, keepdims=True), 1e-12)
        return self.embedder.embed_documents([_as_text(h) for h in hits])


class CrossEncoderReranker:
    """A sentence-transformers `CrossEncoder` from a local folder or hub id (e.g. bge-reranker on GPU)."""

    name = "cross-encoder"

    def __init__(self, model: str, device: str | None = None) -> None:
        from sentence_transformers import CrossEncoder  # heavy: keep inside the adapter

        self.model = CrossEncoder(model, device=device)
        self.calls = 0

    def rerank(self, question: str, hits: Sequence[Hit]) -> list[Hit]:
        """Reorder by the cross-encoder's relevance scores."""
        self.calls += 1
        if not hits:
            return []
        scores = np.asarray(self.model.predict([(question, _as_text(h)) for h in hits]), dtype=float)
        order = np.argsort(-scores, kind="stable")
        return [hits[i].model_copy(update={"score": float(scores[i])}) for i in order]


class BiEncoderReranker:
    """Cosine of question and passage under a bi-encoder other than the index's (e.g. one `cribsheet
    train-scorer --kind bi-encoder` fine-tuned): both embedded at query time, one batch per question.
    """

    name = "bi-encoder"

    def __init__(self, model: str, device: str | None = None) -> None:
        self.model = load_sentence_model(model, device or "cpu", "reranker")
        self.calls = 0

    def rerank(self, question: str, hits: Sequence[Hit]) -> list[Hit]:
        """Reorder by the bi-encoder's cosine."""
        self.calls += 1
        if not hits:
            return []
        scores = query_cosines(self.model, question, [_as_text(h) for h in hits])
        order = np.argsort(-scores, kind="stable")
        return [hits[i].model_copy(update={"score": float(scores[i])}) for i in order]


class QueryLikelihoodReranker:
    """UPR: score = mean log p(question | passage) under the generator LM, through vLLM `prompt_logprobs`.

    One batched engine call per question; needs no reranker weights, only the LM that is already loaded.
    """

    name = "query-likelihood"
    instruction = "\nPlease write a question based on this passage.\nQuestion:"

    def __init__(self, scorer: TokenScorer, max_passage_tokens: int = 320) -> None:
        self.scorer = scorer
        self.max_passage_tokens = max_passage_tokens
        self.calls = 0

    def rerank(self, question: str, hits: Sequence[Hit]) -> list[Hit]:
        """Reorder by mean log p(question | passage)."""
        self.calls += 1
        if not hits:
            return []
        tok = self.scorer.tokenizer
        q_ids = tok.encode(" " + question.strip(), add_special_tokens=False)
        tail = tok.encode(self.instruction, add_special_tokens=False)
        prompts = [
            tok.encode(f"Passage: {_as_text(h)}", add_special_tokens=False)[: self.max_passage_tokens] + tail + q_ids
            for h in hits
        ]
        rows = self.scorer.token_logprobs(prompts)
        scores = np.array([np.mean([lp for lp in row[-len(q_ids) :] if lp is not None] or [-1e9]) for row in rows])
        order = np.argsort(-scores, kind="stable")
        return [hits[i].model_copy(update={"score": float(scores[i])}) for i in order]


class RetrievalOrder:
    """Keeps the retriever's order: the no-rerank baseline."""

    name = "none"

    def __init__(self) -> None:
        self.calls = 0

    def rerank(self, question: str, hits: Sequence[Hit]) -> list[Hit]:
        """The retriever's order, unchanged."""
        self.calls += 1
        return list(hits)


class CrossEncoderConfig(BaseModel):
    """A sentence-transformers model by folder or hub id (a CrossEncoder, or a bi-encoder for `bi-encoder`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    """Local folder or hub id (e.g. BAAI/bge-reranker-base)."""
    device: str | None = None


class QueryLikelihoodConfig(BaseModel):
    """UPR through the generator LM."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_passage_tokens: int = Field(default=320, ge=1)


@RERANKERS.register("dense", NoConfig)
def _dense(config: NoConfig, deps: RerankerDeps) -> Reranker:
    """Cosine of question and passage embeddings (stored vectors)."""
    if deps.embedder is None:
        raise CribsheetError("reranker 'dense' needs an embedder")
    return DenseReranker(deps.embedder)


@RERANKERS.register("cross-encoder", CrossEncoderConfig, arg="model")
def _cross_encoder(config: CrossEncoderConfig, deps: RerankerDeps) -> Reranker:
    """A CrossEncoder from a folder or hub id: cross-encoder:PATH."""
    return CrossEncoderReranker(config.model, config.device)


@RERANKERS.register("bi-encoder", CrossEncoderConfig, arg="model")
def _bi_encoder(config: CrossEncoderConfig, deps: RerankerDeps) -> Reranker:
    """A SentenceTransformer from a folder or hub id: bi-encoder:PATH."""
    return BiEncoderReranker(config.model, config.device)


@RERANKERS.register("none", NoConfig)
def _none(config: NoConfig, deps: RerankerDeps) -> Reranker:
    """The retriever's order."""
    return RetrievalOrder()


@RERANKERS.register("query-likelihood", QueryLikelihoodConfig)
def _query_likelihood(config: QueryLikelihoodConfig, deps: RerankerDeps) -> Reranker:
    """Mean log p(question | passage) under the generator LM (UPR)."""
    if deps.scorer is None:
        raise CribsheetError("reranker 'query-likelihood' needs the vLLM engine (a generator that scores tokens)")
    return QueryLikelihoodReranker(deps.scorer, config.max_passage_tokens)


def build_reranker(ref: str, deps: RerankerDeps) -> Reranker:
    """Build a registered reranker by name; `cross-encoder:PATH` names a CrossEncoder folder or hub id."""
    return RERANKERS.build(RERANKERS.spec(ref), deps)
