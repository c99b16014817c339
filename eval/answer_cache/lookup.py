"""Semantic answer cache (lever 4): a question close enough to one already answered reuses its answer and
skips retrieval, compression and generation.

Within a setting, questions are taken in file order; the cache holds the questions the engine answered so
far (a hit is never a source). A question is a hit when the cosine similarity of its embedding to a cached
question is at least the threshold and the two pass the guard (`eval.answer_cache.guard`: they ask the same thing);
the most similar one is the source. Cached answers are scored against
the hit question's own gold answers, like any other row, and marked (`cache_hit_of`, `cache_similarity`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from eval.answer_cache.guard import same_specifics


@dataclass(frozen=True)
class CacheHit:
    """The answered question a hit reuses, at what similarity, and what the lookup cost."""

    source: str
    similarity: float
    lookup_s: float


@dataclass
class CacheLookups:
    """The cache's verdict per question: the hits, and what the lookup cost every question (hit or not)."""

    hits: dict[str, CacheHit]
    lookup_s: dict[str, float]


def cache_hits(
    ids: Sequence[str],
    embed: Callable[[int], np.ndarray],
    threshold: float,
    texts: Sequence[str] | None = None,
    guard: Callable[[str, str], bool] = same_specifics,
) -> CacheLookups:
    """Which questions (by id, in order) would be served by the cache at `threshold`; `embed(i)` gives the
    unit vector of question i. A hit's lookup time counts that embedding; a miss's does not, because
    retrieval then embeds the same question and its time is already on the retrieve bill (a deployment
    hands the lookup's vector to the retriever). With `texts`, the most similar cached question must also
    pass `guard` (new question, cached question), else the question goes to the engine.
    """
    matrix: np.ndarray | None = None
    answered: list[int] = []
    hits: dict[str, CacheHit] = {}
    lookups: dict[str, float] = {}
    for i, qid in enumerate(ids):
        start = time.perf_counter()
        v = embed(i)
        embedded = time.perf_counter() - start
        if matrix is None:
            matrix = np.empty((len(ids), v.shape[0]), dtype=np.float32)
        if answered:
            sims = matrix[: len(answered)] @ v
            best = int(np.argmax(sims))
            source = answered[best]
            if float(sims[best]) >= threshold and (texts is None or guard(texts[i], texts[source])):
                lookups[qid] = time.perf_counter() - start
                hits[qid] = CacheHit(ids[source], float(sims[best]), lookups[qid])
                continue
        matrix[len(answered)] = v
        answered.append(i)
        lookups[qid] = time.perf_counter() - start - embedded  # a miss: the embedding is retrieval's
    return CacheLookups(hits, lookups)
