"""Fake backends implementing the real Protocols, for fast unit tests."""

from __future__ import annotations

import re
from collections.abc import Sequence

from eval.compress import CachedAgnosticCompressor, CompressionResult
from eval.compress_cache import CompressionCache
from eval.generate import Generation, Probe, WarmReport


def count_words(text: str) -> int:
    return len(text.split())


class WordTokenizer:
    """Enough of a tokenizer for PromptLayout: a plain chat template."""

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):  # noqa: ANN001
        return "".join(f"<{m['role']}>{m['content']}</{m['role']}>" for m in messages) + "<assistant>"


class ExtractingGenerator:
    """Answers with the first passage's first sentence; counts prompts; caches the shared prefix."""

    name = "fake"

    def __init__(self, fail: bool = False) -> None:
        self.tokenizer = WordTokenizer()
        self.batches: list[list[str]] = []
        self.fail = fail
        self.prefix = ""
        self.resets = 0
        self.probes: list[str] = []

    def count_tokens(self, text: str) -> int:
        return count_words(text)

    def warm(self, prefix: str) -> WarmReport:
        self.prefix = prefix
        n = count_words(prefix)
        return WarmReport(prefix_tokens=n, cached_tokens=n, cold_ttft_s=0.2, warm_ttft_s=0.02)

    def reset_cache(self) -> None:
        self.resets += 1

    def probe(self, prompt: str) -> Probe:
        self.probes.append(prompt)
        n = count_words(prompt)
        cached = count_words(self.prefix) if prompt.startswith(self.prefix) else 0
        return Probe(
            prompt_tokens=n,
            cached_tokens=cached,
            ttft_s=0.001 * n,
            prefill_s=0.001 * (n - cached) + 1e-6 * (n - cached) ** 2,
            decode_s=0.01,
            output_tokens=3,
        )

    def generate(self, prompts: Sequence[str]) -> list[Generation]:
        if self.fail:
            raise RuntimeError("engine died")
        self.batches.append(list(prompts))
        outs = []
        for p in prompts:
            m = re.search(r"\[1\] (?:[^:\n]+: )?([^.\n]*)", p)
            cached = count_words(self.prefix) if p.startswith(self.prefix) else 0
            outs.append(
                Generation(
                    text=m.group(1) if m else "I don't know",
                    prompt_tokens=count_words(p),
                    cached_tokens=cached,
                    ttft_s=0.001 * count_words(p),
                )
            )
        return outs


class HalvingCompressor(CachedAgnosticCompressor):
    """Keeps every other word; query-agnostic and cached like the real ones; can fail on a question."""

    name = "halving"

    def __init__(self, fail_on: str | None = None, cache: CompressionCache | None = None) -> None:
        super().__init__(count_words, cache)
        self.fail_on = fail_on
        self.compressed: list[str] = []

    def compress(self, passages: Sequence[str], question: str, ratio: float) -> CompressionResult:
        if self.fail_on and self.fail_on in question:
            raise ValueError("cannot compress this one")
        return super().compress(passages, question, ratio)

    def _compress_many(self, passages: list[str], ratio: float) -> list[str]:
        self.compressed.extend(passages)
        return [" ".join(p.split()[::2]) for p in passages]
