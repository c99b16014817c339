"""Unit scorers: what ranks a context's units for a question in the `pruned` selectors, behind one Protocol
and registered by name. Without one, a unit's score is the cosine of its stored vector and the question's
(the index's embedder); a scorer reads the question and the unit *together* (a cross-encoder), which is what
published pruners that keep answer content do, at the price of one forward pass per unit.

`cross-encoder:PATH` loads a sentence-transformers CrossEncoder from a folder (one `cribsheet train-scorer`
wrote, or any other) or a hub id; `bi-encoder:PATH` a SentenceTransformer (one `train-scorer --kind
bi-encoder` fine-tuned), scoring the cosine of the question's and each unit's embedding, both computed at query
time. A unit is shown to either with the nearest heading above it in its passage (`scored_text`), the same way
in training and at query time.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from corpus.embed import load_sentence_model, query_cosines
from corpus.errors import CribsheetError
from corpus.registry import Registry
from corpus.units import HEADINGS, Span
from corpus.weights import weights_fingerprint

if TYPE_CHECKING:
    import numpy as np


class UnitScorer(Protocol):
    """Scores units of text for a question: higher is more likely to hold its answer."""

    name: str

    def score(self, question: str, units: Sequence[str]) -> np.ndarray:
        """One score per unit, in order (one batched call per question)."""
        ...


SCORERS: Registry[UnitScorer, None] = Registry("unit scorer")
"""Registered unit scorers; the `pruned` selectors' `scorer` field names one (`cross-encoder:PATH`)."""


class ModelScorerConfig(BaseModel):
    """A sentence-transformers model as unit scorer: a CrossEncoder (`cross-encoder:PATH`) or a bi-encoder
    (`bi-encoder:PATH`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    """Local folder (e.g. one `cribsheet train-scorer` wrote) or hub id."""
    device: str = "cpu"
    """torch device."""
    batch_size: int = Field(default=64, ge=1)
    """Inputs per forward pass: (question, unit) pairs for a cross-encoder, texts for a bi-encoder."""


def load_cross_encoder(model: str, device: str) -> Any:
    """A CrossEncoder, loaded once per (model, device, weights) in a process: the `pruned` and `pruned-auto`
    settings of one sweep share it, and a model trained again at the same path is loaded again.
    """
    return _cross_encoder_model(model, device, weights_fingerprint(model))


@lru_cache(maxsize=4)
def _cross_encoder_model(model: str, device: str, weights: str | None) -> Any:
    from sentence_transformers import CrossEncoder  # heavy: keep inside the adapter

    try:
        return CrossEncoder(model, device=device)
    except OSError as exc:
        raise CribsheetError(
            f"unit scorer 'cross-encoder:{model}': no cross-encoder there ({exc}); train one with "
            f"`cribsheet train-scorer --out {model}`"
        ) from None


class CrossEncoderScorer:
    """Scores each (question, unit) pair with a CrossEncoder: its relevance score (sigmoid of a one-label
    model's logit, in [0, 1], on the same scale as a cosine the selectors' other terms were set for).
    """

    name = "cross-encoder"

    def __init__(self, model: str, device: str = "cpu", batch_size: int = 64) -> None:
        self.model = load_cross_encoder(model, device)
        self.batch_size = batch_size
        self.calls = 0

    def score(self, question: str, units: Sequence[str]) -> np.ndarray:
        """The cross-encoder's score of every unit for `question`, in one batched call."""
        import numpy as np

        self.calls += 1
        if not units:
            return np.zeros(0, dtype=np.float32)
        pairs = [(question, u) for u in units]
        scores = self.model.predict(pairs, batch_size=self.batch_size, show_progress_bar=False)
        return np.asarray(scores, dtype=np.float32).reshape(len(units))


@SCORERS.register("cross-encoder", ModelScorerConfig, arg="model")
def _cross_encoder(config: ModelScorerConfig, deps: None) -> UnitScorer:
    """A CrossEncoder from a folder or hub id: cross-encoder:PATH."""
    return CrossEncoderScorer(config.model, config.device, config.batch_size)


class BiEncoderScorer:
    """Scores each unit by the cosine of its embedding and the question's under a (fine-tuned) bi-encoder: the
    same scale as the bundled cosine the selectors' other terms were set for. The question and the units are
    embedded at query time, in one batch.
    """

    name = "bi-encoder"

    def __init__(self, model: str, device: str = "cpu", batch_size: int = 64) -> None:
        self.model = load_sentence_model(model, device, "unit scorer")
        self.batch_size = batch_size
        self.calls = 0

    def score(self, question: str, units: Sequence[str]) -> np.ndarray:
        """The cosine of `question` and every unit, in one batched call."""
        import numpy as np

        self.calls += 1
        if not units:
            return np.zeros(0, dtype=np.float32)
        return query_cosines(self.model, question, units, self.batch_size)


@SCORERS.register("bi-encoder", ModelScorerConfig, arg="model")
def _bi_encoder(config: ModelScorerConfig, deps: None) -> UnitScorer:
    """A SentenceTransformer from a folder or hub id: bi-encoder:PATH."""
    return BiEncoderScorer(config.model, config.device, config.batch_size)


def build_scorer(ref: str) -> UnitScorer:
    """The unit scorer `ref` names (`cross-encoder:PATH`, `bi-encoder:PATH`)."""
    return SCORERS.build(SCORERS.spec(ref), None)


def scorer_weights(ref: str) -> str | None:
    """The weights fingerprint of the model scorer `ref` names (None: it names none, or it has no local copy);
    an unknown scorer is a ValueError, so a config field reports it with its location.
    """
    try:
        spec = SCORERS.spec(ref)
    except CribsheetError as exc:
        raise ValueError(str(exc)) from None
    model = spec.config.get("model")
    return weights_fingerprint(model) if isinstance(model, str) else None


def scored_text(spans: Sequence[Span], i: int) -> str:
    """What a scorer reads for unit `i` of a context's `spans`: the unit, after the nearest heading above it
    in its passage (an outline's heading, API signature or defined term) when there is one, so "Returns a
    promise." is read under "fsPromises.chmod(path, mode)". A heading itself is read alone.
    """
    passage, text, _, kind = spans[i]
    if kind in HEADINGS:
        return text
    for j in range(i - 1, -1, -1):
        if spans[j][0] != passage:
            break
        if spans[j][3] in HEADINGS:
            return f"{spans[j][1]}\n{text}"
    return text
