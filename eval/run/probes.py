"""The latency truth: serial probes, each alone after a cache reset, and the prefill-time fit."""

from __future__ import annotations

from collections.abc import Sequence

from eval.engine.generator import Generator
from eval.run.citations import cited_schema
from eval.run.draft import ProbePart, SampleDraft
from eval.run.generation import reset_and_warm


def probe_drafts(
    drafts: Sequence[SampleDraft],
    probe_ids: set[str],
    generator: Generator,
    prefix: str,
    cited: bool = False,
) -> list[tuple[int, float]]:
    """Serial requests on the probe sample: the latency truth, free of batch queueing. Before each probe the
    prefix cache is reset and the stable `prefix` warmed again, so a probe finds cached only what a user's
    first request would (the prefix), never the blocks of an earlier probe that shared its first passage.

    Returns (uncached prompt tokens, prefill seconds) points for the prefill fit.
    """
    points: list[tuple[int, float]] = []
    for draft in drafts:
        if draft.prompt is None or not draft.ok or draft.key.question_id not in probe_ids:
            continue
        # A structured-output setting is probed under its schema: grammar compilation and masking are its bill.
        schema = cited_schema(draft.n_passages) if cited else None
        reset_and_warm(generator, prefix)
        p = generator.probe(draft.prompt, schema) if schema is not None else generator.probe(draft.prompt)
        r, c = draft.retrieval, draft.compression
        lookup = (r.retrieve_seconds or 0.0) + (r.rerank_seconds or 0.0)
        paid = (c.compress_seconds if c else 0.0) or 0.0
        cold = (c.compress_cold_seconds if c else 0.0) or 0.0
        ttft = p.ttft_s
        draft.probe = ProbePart(
            probe_ttft_s=ttft,
            probe_prefill_s=p.prefill_s,
            probe_decode_s=p.decode_s,
            probe_cached_tokens=p.cached_tokens,
            e2e_latency_s=lookup + paid + ttft if ttft is not None else None,
            e2e_cold_s=lookup + cold + ttft if ttft is not None else None,
            e2e_paid_s=lookup + paid + ttft if ttft is not None else None,
        )
        if p.prefill_s is not None:
            points.append((p.prompt_tokens - p.cached_tokens, p.prefill_s))
    return points


def fit_prefill(points: Sequence[tuple[int, float]]) -> tuple[float, float] | None:
    """Least-squares fit of prefill seconds = a*C + b*C^2 over (uncached prompt tokens C, seconds)."""
    import numpy as np

    usable = [(c, t) for c, t in points if c > 0]
    if len({c for c, _ in usable}) < 2:
        return None
    c = np.array([p[0] for p in usable], dtype=float)
    t = np.array([p[1] for p in usable], dtype=float)
    (a, b), *_ = np.linalg.lstsq(np.stack([c, c * c], axis=1), t, rcond=None)
    return float(a), float(b)
