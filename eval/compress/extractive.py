"""Query-aware sentence selection by embedder similarity: a compressor at the price of an embedder.

The selector lives here (`ExtractiveCompressor`: score, choose within the budget, complete, join); the
`pruned` family that reads its units and vectors from the index is in `eval.compress.pruned`, the budget by
relevance mass in `eval.compress.pruned_auto`, and what a kept unit brings along in `corpus.units`.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from corpus.embed import Embedder, VectorCache
from corpus.errors import CribsheetError
from corpus.sentences import Unit, unit_spans
from corpus.text import content_words
from corpus.units import Span, join_units

if TYPE_CHECKING:
    import numpy as np

from eval.compress.base import COMPRESSORS, CompressionResult, Compressor, CompressorDeps, TokenCounter
from eval.compress.cache import Cached, CompressionCache, MemoryCache, cache_key
from eval.compress.identity import code_version, compressor_identity


class ExtractiveConfig(BaseModel):
    """Sentence selection by the embedder."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_cached: int = Field(default=200_000, ge=1)
    """Sentence vectors kept in memory across the sweep."""
    rank_prior: float = Field(default=0.04, ge=0.0, le=1.0)
    """Score taken off per place a sentence's passage stands below the reranker's first: the reranker's order
    is evidence too (0: similarity alone)."""
    word_overlap: float = Field(default=0.4, ge=0.0, le=5.0)
    """Score added for the share of the question's content words the sentence has (query-aware only): names
    and rare words a sentence embedding underweights (0: similarity alone)."""


class ExtractiveCompressor:
    """Query-aware sentence selection by embedder similarity to the question: an embedder-sized scorer.

    Keeps the best-scored sentences until the token budget is met, in their original order; passages with no
    kept sentence are dropped (`kept` says which remain). A sentence's score is its similarity to the
    question, less `rank_prior` per place its passage stands below the reranker's first, plus
    `word_overlap` times the share of the question's content words it has. Sentence vectors do not depend
    on the question, so they are kept (by sentence text) and a passage seen before costs only the
    question's embedding and a dot product.
    """

    name = "extractive"
    query_aware = True

    def __init__(
        self,
        count_tokens: TokenCounter,
        embedder: Embedder,
        config: ExtractiveConfig | None = None,
        bills: CompressionCache | None = None,
        identity: str = "",
    ) -> None:
        config = config or ExtractiveConfig()
        self.count = count_tokens
        self.embedder = embedder
        self.calls = 0
        self.rank_prior = config.rank_prior
        self.word_overlap = config.word_overlap
        self.max_cached = config.max_cached
        self._sentence_vectors = VectorCache(embedder, config.max_cached)
        self._passages: dict[str, np.ndarray] = {}
        """Sentence vectors by passage, kept across calls (at most `max_cached` sentences in all)."""
        self._held = 0
        self.bills: CompressionCache = bills or MemoryCache()
        """What embedding each passage's sentences cost the first time, by content key: kept with the index's
        compression cache, so every later setting, question and run is billed the same seconds."""
        self.identity = identity or "extractive-vectors"
        self.offline = 0.0
        """Index-time seconds of the stored vectors the last context read (an offline cost; `pruned`)."""

    def uncached(self) -> ExtractiveCompressor:
        """A twin of this selector with nothing kept: sentence vectors it computes are computed now, and billed now."""
        twin = copy.copy(self)
        twin._sentence_vectors = VectorCache(self.embedder, self.max_cached)
        twin._passages, twin._held, twin.bills = {}, 0, MemoryCache()
        return twin

    def compress(self, passages: Sequence[str], question: str, ratio: float) -> CompressionResult:
        """The sentences most similar to `question` until the token budget is met."""
        import numpy as np

        start = time.perf_counter()
        self.calls += 1
        self.offline = 0.0
        split = self.split(passages)
        # The split is not scoring: pruned reads the units the index stored (a LanceDB scan, whose time follows
        # the index and the machine's load, not this request). It is paid here and kept out of the cold bill,
        # which times again only the scoring (the stored vectors' read is likewise replaced by their bill).
        splitting = time.perf_counter() - start
        spans: list[Span] = [
            (pi, p[u[0] : u[1]], u[2], u[3])
            for pi, (p, units) in enumerate(zip(passages, split, strict=True))
            for u in units
        ]
        sentences = [(pi, text) for pi, text, _, _ in spans]
        tokens_in = sum(self.count(p) for p in passages)
        if not sentences:
            return CompressionResult(texts=[], tokens_in=tokens_in, tokens_out=0, seconds=0.0, calls=1, kept=[])
        sizes = [self.count(s) for _, s in sentences]
        sims, vector_bill, vector_read = self.scores(passages, spans, question)
        sims = sims - self.rank_prior * np.array([pi for pi, _ in sentences], dtype=sims.dtype)
        asked = set(content_words(question)) if self.query_aware else set()
        words = [set(content_words(s)) for _, s in sentences] if asked else []
        if asked and self.word_overlap:
            shares = [len(asked & w) / len(asked) for w in words]
            sims = sims + self.word_overlap * np.array(shares, dtype=sims.dtype)
        chosen = self.complete(self.select(sims, sizes, tokens_in, ratio, sentences), sims, sentences, asked, words)
        units = self.units(spans)
        chosen |= {j for i in chosen for j in units.get(i, ())}
        texts: list[str] = []
        kept: list[int] = []
        for pi in range(len(passages)):
            picked = [i for i, (p, _) in enumerate(sentences) if p == pi and i in chosen]
            if picked:
                texts.append(join_units([(spans[i][1], spans[i][3]) for i in picked]))
                kept.append(pi)
        seconds = time.perf_counter() - start
        return CompressionResult(
            texts=texts,
            tokens_in=tokens_in,
            tokens_out=sum(self.count(t) for t in texts),
            seconds=seconds,
            # From nothing: the scoring done here plus what every passage's sentence vectors cost when they
            # were first computed, whoever computed them (an earlier setting, question or run).
            cold_seconds=seconds - splitting - vector_read + vector_bill,
            calls=1,
            kept=kept,
            offline_seconds=self.offline or None,
        )

    def scores(self, passages: Sequence[str], spans: list[Span], question: str) -> tuple[np.ndarray, float, float]:
        """Each unit's score for `question` (here: the similarity of its vector to the question's), what its
        vectors cost from nothing (their bill), and the seconds spent here getting them (which the bill
        replaces on the cold bill: a vector read or computed before is billed what it first cost).
        """
        sentences = [(pi, text) for pi, text, _, _ in spans]
        start = time.perf_counter()
        vectors, bill = self.vectors_and_cost(passages, sentences)
        reading = time.perf_counter() - start
        return vectors @ self.query_vector(question, vectors), bill, reading

    def select(
        self, sims: np.ndarray, sizes: list[int], tokens_in: int, ratio: float, sentences: list[tuple[int, str]]
    ) -> set[int]:
        """The best-scored sentences until `tokens_in / ratio` tokens are kept (a sentence that would pass
        the budget is skipped for a shorter one further down).
        """
        import numpy as np

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
        return chosen

    def complete(
        self,
        chosen: set[int],
        sims: np.ndarray,
        sentences: list[tuple[int, str]],
        asked: set[str],
        words: list[set[str]],
    ) -> set[int]:
        """What the selection keeps besides its budget's choice (`asked`: the question's content words, empty
        for a query-agnostic selector; `words`: each sentence's). Here nothing: the choice stands.
        """
        return chosen

    def split(self, passages: Sequence[str]) -> list[list[Unit]]:
        """The selection units of each passage: its sentences (this compressor has no index to read an
        outline from).
        """
        return [unit_spans(p) for p in passages]

    def units(self, spans: list[Span]) -> dict[int, list[int]]:
        """Units a kept unit brings along (none: every unit stands alone)."""
        return {}

    def vectors_and_cost(self, passages: Sequence[str], sentences: list[tuple[int, str]]) -> tuple[np.ndarray, float]:
        """Unit vectors of `sentences` (passage index, text) and what they cost to compute from nothing.

        Each passage's sentences are embedded as one batch, the first time the passage is seen, and that
        batch's seconds are its bill from then on (kept by content key in `bills`). The batch depends only on
        the passage, so the bill does not depend on the order of settings or questions, nor on the run.
        """
        import numpy as np

        rows: list[np.ndarray] = []
        bill = 0.0
        fresh: dict[str, Cached] = {}
        for pi, passage in enumerate(passages):
            mine = [text for p, text in sentences if p == pi]
            if not mine:
                continue
            key = cache_key(self.identity, 0.0, passage)
            vectors = self._passages.get(passage)
            billed = self.bills.get(key) or fresh.get(key)
            if vectors is None or billed is None:
                start = time.perf_counter()
                vectors = self.embedder.embed_documents(mine)
                spent = time.perf_counter() - start
                self._keep(passage, vectors)
                if billed is None:
                    billed = fresh[key] = Cached("", spent)
            rows.append(vectors)
            bill += billed.seconds
        if fresh:
            self.bills.put_many(fresh)
        return np.concatenate(rows), bill

    def _keep(self, passage: str, vectors: np.ndarray) -> None:
        if self._held + len(vectors) > self.max_cached:
            self._passages.clear()
            self._held = 0
        self._passages[passage] = vectors
        self._held += len(vectors)

    def query_vector(self, question: str, vectors: np.ndarray) -> np.ndarray:
        """What sentences are scored against: the question's vector."""
        return self.embedder.embed_query(question)

    def flush(self) -> None:
        """Persist the passages' bills added since the last flush (the vectors live in memory)."""
        self.bills.flush()


@COMPRESSORS.register("extractive", ExtractiveConfig)
def _extractive(config: ExtractiveConfig, deps: CompressorDeps) -> Compressor:
    """Sentences most similar to the question, query-aware."""
    if deps.embedder is None:
        raise CribsheetError("compressor 'extractive' needs an embedder")
    embedder = deps.embedder
    # The bill's key: what computes the vectors (embedder, precision, dimension, libraries, this code).
    what = {"embedder": embedder.name, "dim": embedder.dim, "precision": getattr(embedder, "precision", None)}
    identity = compressor_identity("extractive-vectors", what, None, code_version(ExtractiveCompressor))
    return ExtractiveCompressor(deps.count_tokens, embedder, config, deps.cache, identity)
