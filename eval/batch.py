"""One engine batch per setting, from the same cache state every time (only the stable prefix warm)."""

from __future__ import annotations

from eval.generate import Generator
from eval.sample import GenerationPart, SampleDraft
from eval.scoring import score_answer


def reset_and_warm(generator: Generator, prefix: str) -> None:
    """Forget every cached block, then cache the stable prefix again."""
    generator.reset_cache()
    generator.warm(prefix)


def generate_setting(drafts: list[SampleDraft], generator: Generator, prefix: str) -> None:
    """One engine batch for the setting, from a cache holding only the stable prefix; answers are scored."""
    reset_and_warm(generator, prefix)
    waiting = [d for d in drafts if d.prompt is not None and d.error is None]
    try:
        gens = generator.generate([d.prompt or "" for d in waiting])
        if len(gens) != len(waiting):
            raise RuntimeError(f"generator returned {len(gens)} outputs for {len(waiting)} prompts")
    except Exception as exc:
        for d in waiting:
            d.fail("generate", exc)
        return
    for d, gen in zip(waiting, gens, strict=True):
        d.generation = GenerationPart(
            answer=gen.text, prompt_tokens=gen.prompt_tokens, cached_tokens=gen.cached_tokens, ttft_s=gen.ttft_s
        )
        context = d.compression.context_text if d.compression else None
        d.scores = score_answer(gen.text, context or "", d.key.gold_answers)
