"""One engine batch per setting, from the same cache state every time (only the stable prefix warm)."""

from __future__ import annotations

from eval.engine.generator import BatchProgress, Generator, ReportsBatchProgress
from eval.run.citations import citation_part, cited_schema
from eval.run.draft import GenerationPart, SampleDraft
from eval.run.scoring import score_answer


def reset_and_warm(generator: Generator, prefix: str) -> None:
    """Forget every cached block, then cache the stable prefix again."""
    generator.reset_cache()
    generator.warm(prefix)


def generate_setting(
    drafts: list[SampleDraft],
    generator: Generator,
    prefix: str,
    cited: bool = False,
    progress: BatchProgress | None = None,
) -> None:
    """One engine batch for the setting, from a cache holding only the stable prefix; answers are scored.
    `cited`: answers are held to the `{answer, citations}` schema and their citations scored. `progress`:
    (finished, total) as each request of the batch finishes, where the engine reports it.
    """
    reset_and_warm(generator, prefix)
    limit = getattr(generator, "max_schema_prompt_tokens" if cited else "max_prompt_tokens", None)
    for d in drafts:  # one prompt too long for the engine fails alone, not the whole batch
        if limit is not None and d.prompt is not None and d.error is None:
            n = generator.count_tokens(d.prompt)
            if n > limit:
                d.fail("generate", f"prompt of {n} tokens exceeds max_model_len less the answer's tokens ({limit})")
    waiting = [d for d in drafts if d.prompt is not None and d.error is None]
    reporter = generator if progress is not None and isinstance(generator, ReportsBatchProgress) else None
    if reporter is not None:
        reporter.batch_progress = progress
    try:
        prompts = [d.prompt or "" for d in waiting]
        if cited:  # each prompt's citations held to the passages it has
            gens = generator.generate(prompts, [cited_schema(d.n_passages) for d in waiting])
        else:
            gens = generator.generate(prompts)
        if len(gens) != len(waiting):
            raise RuntimeError(f"generator returned {len(gens)} outputs for {len(waiting)} prompts")
    except Exception as exc:
        for d in waiting:
            d.fail("generate", exc)
        return
    finally:
        if reporter is not None:
            reporter.batch_progress = None
    for d, gen in zip(waiting, gens, strict=True):
        answer = gen.text
        if cited:
            answer, d.citation = citation_part(gen.text, d.passage_docs or [], d.gold_docs or [])
        d.generation = GenerationPart(
            answer=answer,
            prompt_tokens=gen.prompt_tokens,
            cached_tokens=gen.cached_tokens,
            ttft_s=gen.ttft_s,
            answer_cut=gen.cut,
        )
        context = d.compression.context_text if d.compression else None
        d.scores = score_answer(answer, context or "", d.key.gold_answers)
