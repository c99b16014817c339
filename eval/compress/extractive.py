"""Query-aware sentence selection by embedder similarity: a compressor at the price of an embedder."""

from __future__ import annotations

import time
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from corpus.chunk import sentence_spans
from corpus.embed import Embedder, VectorCache
from corpus.errors import CribsheetError
from eval.compress.base import COMPRESSORS, CompressionResult, Compressor, CompressorDeps, TokenCounter


class ExtractiveConfig(BaseModel):
    """Sentence selection by the embedder."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_cached: int = Field(default=200_000, ge=1)
    """Sentence vectors kept in memory across the sweep."""


class ExtractiveCompressor:
    """Query-aware sentence selection by embedder similarity to the question: an embedder-sized scorer.

    Keeps the sentences most similar to the question until the token budget is met, in their original
    order; passages with no kept sentence are dropped (`kept` says which remain). Sentence vectors do not
    depend on the question, so they are kept (by sentence text) and a passage seen before costs only the
    question's embedding and a dot product.
    """

    name = "extractive"
    query_aware = True

    def __init__(self, count_tokens: TokenCounter, embedder: Embedder, max_cached: int = 200_000) -> None:
        self.count = count_tokens
        self.embedder = embedder
        self.calls = 0
        self._sentence_vectors = VectorCache(embedder, max_cached)

    def compress(self, passages: Sequence[str], question: str, ratio: float) -> CompressionResult:
        """The sentences most similar to `question` until the token budget is met."""
        import numpy as np

        start = time.perf_counter()
        self.calls += 1
        sentences = [(pi, p[s:e]) for pi, p in enumerate(passages) for s, e, _ in sentence_spans(p)]
        tokens_in = sum(self.count(p) for p in passages)
        if not sentences:
            return CompressionResult(texts=[], tokens_in=tokens_in, tokens_out=0, seconds=0.0, calls=1, kept=[])
        sizes = [self.count(s) for _, s in sentences]
        sims = self._sentence_vectors([s for _, s in sentences]) @ self.embedder.embed_query(question)
        budget = max(1, round(tokens_in / ratio))
        chosen: set[int] = set()
        used = 0
        for i in np.argsort(-sims, kind="stable"):
            if chosen and used + sizes[i] > budget:
                continue  # try shorter sentences further down; stop only when the budget is exhausted
            chosen.add(int(i))
            used += sizes[i]
            if used >= budget:
                break
        texts: list[str] = []
        kept: list[int] = []
        for pi in range(len(passages)):
            picked = [s for i, (p, s) in enumerate(sentences) if p == pi and i in chosen]
            if picked:
                texts.append(" ".join(picked))
                kept.append(pi)
        return CompressionResult(
            texts=texts,
            tokens_in=tokens_in,
            tokens_out=sum(self.count(t) for t in texts),
            seconds=time.perf_counter() - start,
            calls=1,
            kept=kept,
        )

    def flush(self) -> None:
        """Nothing persisted: sentence vectors live in memory."""


@COMPRESSORS.register("extractive", ExtractiveConfig)
def _extractive(config: ExtractiveConfig, deps: CompressorDeps) -> Compressor:
    """Sentences most similar to the question, query-aware."""
    if deps.embedder is None:
        raise CribsheetError("compressor 'extractive' needs an embedder")
    return ExtractiveCompressor(deps.count_tokens, deps.embedder, config.max_cached)
