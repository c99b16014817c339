"""Engine-scored word pruning: LLMLingua-style selection scored by the vLLM engine in one batched pass."""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from corpus.errors import CribsheetError
from eval.compress.base import COMPRESSORS, CachedAgnosticCompressor, Compressor, CompressorDeps, TokenCounter
from eval.compress.cache import CompressionCache
from eval.compress.identity import code_version, compressor_identity
from eval.engine.generator import TokenScorer


class EngineLinguaConfig(BaseModel):
    """Word pruning by the engine's token surprisal."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    keep_numbers: bool = True
    """Keep words with digits first (numbers and dates are what questions ask)."""


_WORD = re.compile(r"\S+")


class EngineLinguaCompressor(CachedAgnosticCompressor):
    """LLMLingua-style word pruning scored by the vLLM engine in one batched `prompt_logprobs` pass.

    A word's score is the highest surprisal (-log p) among its tokens, so a rare word split into
    sub-words ("Eocene") is kept whole or dropped whole; the most surprising words are kept until the
    token budget is met. Words with digits are kept first (numbers and dates are what questions ask).
    """

    name = "engine-lingua"

    def __init__(
        self,
        count_tokens: TokenCounter,
        scorer: TokenScorer,
        keep_numbers: bool = True,
        cache: CompressionCache | None = None,
        identity: str = "",
    ) -> None:
        super().__init__(count_tokens, cache, identity)
        self.scorer = scorer
        self.keep_numbers = keep_numbers

    def _compress_many(self, passages: list[str], ratio: float) -> list[str]:
        tok = self.scorer.tokenizer
        encoded = [tok(p, add_special_tokens=False, return_offsets_mapping=True) for p in passages]
        logprobs = self.scorer.token_logprobs([e["input_ids"] for e in encoded])
        return [
            self._prune(p, e["offset_mapping"], lp, ratio) for p, e, lp in zip(passages, encoded, logprobs, strict=True)
        ]

    def _prune(
        self, text: str, offsets: Sequence[tuple[int, int]], logprobs: Sequence[float | None], ratio: float
    ) -> str:
        words = [(m.start(), m.end()) for m in _WORD.finditer(text)]
        if not words:
            return text
        score = [0.0] * len(words)
        ntok = [0] * len(words)
        w = 0
        for (start, _), lp in zip(offsets, logprobs, strict=True):
            while w < len(words) - 1 and start >= words[w][1]:
                w += 1
            ntok[w] += 1
            score[w] = max(score[w], 1e9 if lp is None else -lp)  # the first token has no context: keep it
        budget = max(1, round(sum(ntok) / ratio))
        order = sorted(range(len(words)), key=lambda i: -score[i])
        if self.keep_numbers:
            order.sort(key=lambda i: not any(c.isdigit() for c in text[words[i][0] : words[i][1]]))
        keep: set[int] = set()
        used = 0
        for i in order:
            if used >= budget:
                break
            keep.add(i)
            used += max(ntok[i], 1)
        return " ".join(text[a:b] for i, (a, b) in enumerate(words) if i in keep)


@COMPRESSORS.register("engine-lingua", EngineLinguaConfig)
def _engine_lingua(config: EngineLinguaConfig, deps: CompressorDeps) -> Compressor:
    """Word pruning scored by the vLLM engine, query-agnostic, cached by content."""
    if deps.scorer is None:
        raise CribsheetError("compressor 'engine-lingua' needs a vLLM engine that scores tokens")
    code = code_version(EngineLinguaCompressor, CachedAgnosticCompressor)
    # The scorer engine's resolved dtype is part of what it computes (bfloat16 and float32 logprobs differ).
    precision = getattr(deps.scorer, "precision", None)
    config_here = config.model_dump() | {"scorer_dtype": precision}
    identity = compressor_identity("engine-lingua", config_here, deps.scorer_model, code)
    return EngineLinguaCompressor(deps.count_tokens, deps.scorer, config.keep_numbers, deps.cache, identity)
