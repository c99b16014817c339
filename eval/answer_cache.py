"""Semantic answer cache (lever 4): a question close enough to one already answered reuses its answer and
skips retrieval, compression and generation.

Within a setting, questions are taken in file order; the cache holds the questions the engine answered so
far (a hit is never a source). A question is a hit when the cosine similarity of its embedding to a cached
question is at least the threshold; the most similar one is the source. Cached answers are scored against
the hit question's own gold answers, like any other row, and marked (`cache_hit_of`, `cache_similarity`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from eval.sample import CachePart, CompressionPart, GenerationPart, ProbePart, SampleDraft
from eval.scoring import score_answer

_SPECIFIC = re.compile(r"\d[\d,.]*\d|\d|\b[A-Z][\w'-]*")
_PREFIX = re.compile(r"^\s*fill in the blank:\s*", re.IGNORECASE)


_FUNCTION_WORDS = frozenset(
    "What Who Whom Whose When Where Which Why How The A An In On At Of For From By To With Is Was Are Were "
    "Did Does Do Has Have Had It Its This That These Those There According".split()
)


def specifics(question: str) -> frozenset[str]:
    """The numbers and capitalised names of a question (question and function words aside): what makes it
    about this entity and this attribute rather than a neighbour's.
    """
    text = _PREFIX.sub("", question.strip())
    found = (m.group(0).rstrip(".,") for m in _SPECIFIC.finditer(text))
    return frozenset(w for w in found if w not in _FUNCTION_WORDS)


def same_specifics(a: str, b: str) -> bool:
    """The guard in front of a hit: both questions name the same numbers and names. A close embedding with
    another entity or another number ("... in 1889 ... how many metres" vs "... in which year ... 330
    metres") is a near miss, never a hit.
    """
    return specifics(a) == specifics(b)


@dataclass(frozen=True)
class CacheHit:
    """The answered question a hit reuses, at what similarity, and what the lookup cost."""

    source: str
    similarity: float
    lookup_s: float


def cache_hits(
    ids: Sequence[str],
    embed: Callable[[int], np.ndarray],
    threshold: float,
    texts: Sequence[str] | None = None,
) -> dict[str, CacheHit]:
    """Which questions (by id, in order) would be served by the cache at `threshold`; `embed(i)` gives the
    unit vector of question i (the lookup time counts its embedding). With `texts`, the most similar cached
    question must also pass `same_specifics`, else the question goes to the engine.
    """
    answered: list[int] = []
    vectors: list[np.ndarray] = []
    hits: dict[str, CacheHit] = {}
    for i, qid in enumerate(ids):
        start = time.perf_counter()
        v = embed(i)
        if vectors:
            sims = np.stack(vectors) @ v
            best = int(np.argmax(sims))
            guarded = texts is None or same_specifics(texts[i], texts[answered[best]])
            if float(sims[best]) >= threshold and guarded:
                hits[qid] = CacheHit(ids[answered[best]], float(sims[best]), time.perf_counter() - start)
                continue
        answered.append(i)
        vectors.append(v)
    return hits


def serve_hits(drafts: Sequence[SampleDraft], hits: dict[str, CacheHit]) -> None:
    """Give each hit draft its source's answer and context, scored against its own gold answers; the
    end-to-end latency of a hit is its lookup.
    """
    by_id = {d.key.question_id: d for d in drafts}
    for d in drafts:
        hit = hits.get(d.key.question_id)
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
        d.generation = GenerationPart(answer=src.generation.answer, prompt_tokens=0, cached_tokens=0, ttft_s=None)
        d.citation = src.citation
        d.scores = score_answer(src.generation.answer, context or "", d.key.gold_answers)
        d.probe = ProbePart(e2e_latency_s=hit.lookup_s, e2e_cold_s=hit.lookup_s, e2e_paid_s=hit.lookup_s)
