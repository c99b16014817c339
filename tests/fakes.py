"""Fake backends implementing the real Protocols, for fast unit tests."""

from __future__ import annotations

import re
from collections.abc import Sequence

from eval.compress import CompressionResult
from eval.generate import Generation, WarmReport


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

    def count_tokens(self, text: str) -> int:
        return count_words(text)

    def warm(self, prefix: str) -> WarmReport:
        self.prefix = prefix
        n = count_words(prefix)
        return WarmReport(prefix_tokens=n, cached_tokens=n, cold_ttft_s=0.2, warm_ttft_s=0.02)

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


class HalvingCompressor:
    """Keeps every other word; query-agnostic; counts calls; can be told to fail on a question."""

    name = "halving"
    query_aware = False

    def __init__(self, fail_on: str | None = None) -> None:
        self.calls = 0
        self.fail_on = fail_on

    def compress(self, passages: Sequence[str], question: str, ratio: float) -> CompressionResult:
        self.calls += 1
        if self.fail_on and self.fail_on in question:
            raise ValueError("cannot compress this one")
        texts = [" ".join(p.split()[::2]) for p in passages]
        return CompressionResult(
            texts=texts, tokens_in=sum(map(count_words, passages)), tokens_out=sum(map(count_words, texts)), seconds=0.0
        )
