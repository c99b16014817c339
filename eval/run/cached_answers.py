"""Serving answer-cache hits inside a sweep: a hit draft takes its source's answer and context, scored
against its own gold answers.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from eval.answer_cache.lookup import CacheLookups
from eval.run.citations import score_citations
from eval.run.draft import CachePart, CompressionPart, GenerationPart, SampleDraft
from eval.run.scoring import score_answer


def serve_hits(drafts: Sequence[SampleDraft], cache: CacheLookups) -> None:
    """Give each hit draft its source's answer and context, scored against its own gold answers (and gold
    documents, for citations). Its latency, the lookup alone, is measured in the latency phase.
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
