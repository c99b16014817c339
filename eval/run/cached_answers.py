"""Serving answer-cache hits inside a sweep: a hit draft takes its source's answer and context, scored
against its own gold answers; a probed miss pays the lookup in its end-to-end latency.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from eval.answer_cache.lookup import CacheLookups
from eval.run.citations import score_citations
from eval.run.draft import CachePart, CompressionPart, GenerationPart, ProbePart, SampleDraft
from eval.run.scoring import score_answer


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
