"""Semantic answer cache (lever 4): a question close enough to one already answered reuses its answer and
skips retrieval, compression and generation.

Within a setting, questions are taken in file order; the cache holds the questions the engine answered so
far (a hit is never a source). A question is a hit when the cosine similarity of its embedding to a cached
question is at least the threshold and the two pass the guard (`eval.cache_guard`: they ask the same thing);
the most similar one is the source. Cached answers are scored against
the hit question's own gold answers, like any other row, and marked (`cache_hit_of`, `cache_similarity`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from eval.cache_guard import same_specifics
from eval.citations import score_citations
from eval.sample import CachePart, CompressionPart, GenerationPart, ProbePart, SampleDraft
from eval.scoring import score_answer


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
    unit vector of question i (the lookup time counts it). With `texts`, the most similar cached question
    must also pass `guard` (new question, cached question), else the question goes to the engine.
    """
    matrix: np.ndarray | None = None
    answered: list[int] = []
    hits: dict[str, CacheHit] = {}
    lookups: dict[str, float] = {}
    for i, qid in enumerate(ids):
        start = time.perf_counter()
        v = embed(i)
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
        lookups[qid] = time.perf_counter() - start
    return CacheLookups(hits, lookups)


def serve_hits(drafts: Sequence[SampleDraft], cache: CacheLookups, probes: set[str]) -> None:
    """Give each hit draft its source's answer and context, scored against its own gold answers (and gold
    documents, for citations); a probed hit's end-to-end latency is its lookup (latency, as for any request,
    only on the probe sample).
    """
    by_id = {d.key.question_id: d for d in drafts}
    for d in drafts:
        hit = cache.hits.get(d.key.question_id)
        if hit is None:
            continue
        src = by_id[hit.source]
        d.cache = CachePart(cache_hit_of=hit.source, cache_similarity=hit.similarity)
        if src.generation is None or src.error is not None:
            d.fail("answer cache", f"the cached question {hit.source} has no answer")
            continue
        context = src.compression.context_text if src.compression else None
        d.compression = CompressionPart(
            context_chunk_ids=src.compression.context_chunk_ids if src.compression else "[]", context_text=context
        )
        d.generation = GenerationPart(
            answer=src.generation.answer,
            prompt_tokens=0,
            cached_tokens=0,
            ttft_s=None,
            answer_cut=src.generation.answer_cut,
        )
        if src.citation is not None and src.citation.citations is not None:
            d.citation = score_citations(json.loads(src.citation.citations), src.passage_docs or [], d.gold_docs or [])
        elif src.citation is not None:
            d.citation = src.citation  # the source's answer did not follow the schema: neither does this one
        d.scores = score_answer(src.generation.answer, context or "", d.key.gold_answers)
        if d.key.question_id in probes:
            d.probe = ProbePart(e2e_latency_s=hit.lookup_s, e2e_cold_s=hit.lookup_s, e2e_paid_s=hit.lookup_s)


def add_lookups(drafts: Sequence[SampleDraft], cache: CacheLookups) -> None:
    """A probed miss paid the cache lookup before the rest of its bill: add it to its end-to-end latency."""
    for d in drafts:
        lookup = cache.lookup_s.get(d.key.question_id)
        if d.cache is not None or d.probe is None or lookup is None:
            continue
        p = d.probe
        keys = ("e2e_latency_s", "e2e_cold_s", "e2e_paid_s")
        d.probe = p.model_copy(update={k: getattr(p, k) + lookup for k in keys if getattr(p, k) is not None})
