"""The `pruned` selectors: the extractive selector on the units and unit vectors the index stored, so pruning
at query time costs a read and a dot product (or, with a trained `scorer`, one cross-encoder batch), and its
query-agnostic twin. `pruned-auto` (a budget by relevance mass) is in `eval.compress.pruned_auto`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from corpus.embed import Embedder
from corpus.errors import CribsheetError
from corpus.sentences import SentenceVectors, Unit
from corpus.units import Span
from eval.compress.base import COMPRESSORS, Compressor, CompressorDeps, TokenCounter
from eval.compress.extractive import ExtractiveCompressor, ExtractiveConfig
from eval.compress.scorer import UnitScorer, build_scorer, scored_text, scorer_weights

if TYPE_CHECKING:
    import numpy as np


class PrunedConfig(ExtractiveConfig):
    """The query-aware pruned selectors: the extractive knobs and what scores a unit."""

    scorer: str | None = None
    """What scores each unit for the question. None: the cosine of the unit's stored vector and the question's
    (the index's embedder). `cross-encoder:PATH`: a cross-encoder that reads the question and the unit together
    (a folder `cribsheet train-scorer` wrote, or any sentence-transformers CrossEncoder), one batch per
    question, its seconds on the cold bill."""
    scorer_weights: str | None = Field(default=None, pattern=r"^[0-9a-f]{16}$")
    """The scorer's weights fingerprint, filled in when the config is built: part of the setting's hash and so
    of the run's identity (a scorer trained again at the same path is another setting); a value that differs
    from the folder's weights is refused (the setting was made with other weights)."""

    @model_validator(mode="before")
    @classmethod
    def _fingerprint_scorer(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if not data.get("scorer"):
            if data.get("scorer_weights"):
                raise ValueError("scorer_weights without a scorer")
            return data
        found = scorer_weights(data["scorer"])
        given = data.get("scorer_weights")
        if given is None:
            return {**data, "scorer_weights": found}
        if found is not None and given != found:
            raise ValueError(
                f"scorer {data['scorer']}: its weights are {found} now, not {given} as when this setting was made"
            )
        return data

    @model_serializer(mode="wrap")
    def _without_absent_scorer(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Without a scorer the dump is what it was before scorers existed, so every earlier setting's hash
        # and every earlier sweep's config hash stay what they were.
        data: dict[str, Any] = handler(self)
        if self.scorer is None:
            data.pop("scorer", None)
            data.pop("scorer_weights", None)
        return data


NEEDS_SENTENCE_VECTORS = frozenset({"pruned", "pruned-agnostic", "pruned-auto"})
"""Compressors that read the sentence vectors an index stores (`cribsheet index --sentence-vectors`)."""


def missing_sentence_vectors(name: str) -> CribsheetError:
    """The error for compressor `name` on an index without sentence vectors."""
    return CribsheetError(
        f"compressor '{name}' needs sentence vectors in the index: rebuild it with "
        "`cribsheet index --sentence-vectors` (options.sentence_vectors: true)"
    )


class PrunedCompressor(ExtractiveCompressor):
    """The extractive selector with sentence vectors computed at index time: at query time a lookup and a
    dot product with the question's vector (which the retriever and reranker already computed: the embedder
    keeps recent query vectors), so pruning costs about what reranking does. A sentence the index lacks is
    embedded here (`missed` counts them; the cost is in the sample's compressor seconds).

    With a `scorer`, a unit's score is the scorer's (question and unit read together, one batch per
    question) instead of the cosine; no vector is read, and the scoring's seconds are on the cold bill.

    `query_aware=False` is its agnostic twin: the same selector scoring sentences against the centroid of
    the context's sentences (what the context is mostly about) instead of the question.
    """

    name = "pruned"

    def __init__(
        self,
        count_tokens: TokenCounter,
        embedder: Embedder,
        stored: SentenceVectors,
        query_aware: bool = True,
        config: ExtractiveConfig | None = None,
        scorer: UnitScorer | None = None,
    ) -> None:
        super().__init__(count_tokens, embedder, config)
        if scorer is not None and not query_aware:
            raise CribsheetError("a unit scorer reads the question: the agnostic twin takes none")
        self.stored = stored
        self.query_aware = query_aware
        self.name = "pruned" if query_aware else "pruned-agnostic"
        self.scorer = scorer
        self.missed = 0

    def scores(self, passages: Sequence[str], spans: list[Span], question: str) -> tuple[np.ndarray, float, float]:
        """The scorer's scores when there is one (all its time is scoring: nothing is replaced by a bill),
        else the cosines of the stored vectors.
        """
        if self.scorer is None:
            return super().scores(passages, spans, question)
        import numpy as np

        scores = self.scorer.score(question, [scored_text(spans, i) for i in range(len(spans))])
        return np.asarray(scores, dtype=np.float32), 0.0, 0.0

    def vectors_and_cost(self, passages: Sequence[str], sentences: list[tuple[int, str]]) -> tuple[np.ndarray, float]:
        """Stored vectors, embedding only what the index lacks; the cost is the stored vectors' share of the
        index-time embedding plus what the missing ones cost here.
        """
        import numpy as np

        texts = [text for _, text in sentences]
        found, costs = self.stored.lookup_with_cost(texts)
        missing = [t for t in texts if t not in found]
        bill = sum(costs.values())
        self.offline = bill  # the index built these vectors: an offline cost, not this request's
        if missing:
            self.missed += len(missing)
            found |= dict(zip(missing, self._sentence_vectors(missing), strict=True))
            bill += self._sentence_vectors.cold_seconds(missing)
        return np.stack([found[t] for t in texts]), bill

    def flush(self) -> None:
        """Nothing to persist: the vectors and their bill are the index's."""

    def split(self, passages: Sequence[str]) -> list[list[Unit]]:
        """Each passage's units as the index stored them (code blocks whole, table rows, block kinds), or its
        sentences where it stored none (the same split its sentence vectors were made from).
        """
        return self.stored.units(passages)

    def query_vector(self, question: str, vectors: np.ndarray) -> np.ndarray:
        """The question's vector, or (agnostic twin) the normalised centroid of the context's sentences."""
        import numpy as np

        if self.query_aware:
            return self.embedder.embed_query(question)
        centroid = vectors.mean(axis=0)
        return np.asarray(centroid / (np.linalg.norm(centroid) or 1.0), dtype=np.float32)


PrunedMaker = Callable[[TokenCounter, Embedder, SentenceVectors, Any, UnitScorer | None], Compressor]
"""(count_tokens, embedder, stored vectors, config, unit scorer or None) -> a pruned selector."""


def register_pruned(name: str, config: type[ExtractiveConfig], make: PrunedMaker, summary: str) -> None:
    """Register the pruned selector `name`: one factory for the family, which reads the index's stored
    vectors (refusing an index without them) and builds the config's unit scorer when it names one.
    """

    def factory(cfg: ExtractiveConfig, deps: CompressorDeps) -> Compressor:
        if deps.embedder is None or deps.index_path is None:
            raise CribsheetError(f"compressor '{name}' needs an embedder and an index")
        stored = SentenceVectors(deps.index_path, deps.index_version)
        if not stored.available:
            raise missing_sentence_vectors(name)
        ref = getattr(cfg, "scorer", None)
        return make(deps.count_tokens, deps.embedder, stored, cfg, build_scorer(ref) if ref else None)

    factory.__doc__ = summary
    COMPRESSORS.register(name, config)(factory)


register_pruned(
    "pruned",
    PrunedConfig,
    lambda count, embedder, stored, config, scorer: PrunedCompressor(count, embedder, stored, True, config, scorer),
    "Units most similar to the question (stored vectors, or a trained scorer), to a fixed budget (query-aware).",
)
register_pruned(
    "pruned-agnostic",
    ExtractiveConfig,
    lambda count, embedder, stored, config, scorer: PrunedCompressor(count, embedder, stored, False, config),
    "The pruned selector's agnostic twin: units closest to the context's centroid (no question).",
)
