"""Compressors behind one Protocol: none, LLMLingua (query-agnostic), LongLLMLingua (query-aware)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from corpus.errors import CribsheetError
from eval.settings import CompressorConfig


class CompressionResult(BaseModel):
    """What a compressor did to one context, tokens counted with the generator's tokenizer."""

    model_config = ConfigDict(frozen=True)

    texts: list[str]
    """Compressed passages in prompt order (a query-aware compressor may drop some)."""
    tokens_in: int
    tokens_out: int
    seconds: float
    """Compressor wall time spent for this context (0 when every piece came from the cache)."""

    @property
    def ratio(self) -> float:
        return self.tokens_in / self.tokens_out if self.tokens_out else float("inf")


TokenCounter = Callable[[str], int]


class Compressor(Protocol):
    """Shrinks the passages of one context to about 1/ratio of their tokens."""

    name: str
    query_aware: bool

    def compress(self, passages: Sequence[str], question: str, ratio: float) -> CompressionResult: ...


class NoCompressor:
    """Identity: the baseline."""

    name = "none"
    query_aware = False

    def __init__(self, count_tokens: TokenCounter, **_: Any) -> None:
        self.count = count_tokens

    def compress(self, passages: Sequence[str], question: str, ratio: float) -> CompressionResult:
        n = sum(self.count(p) for p in passages)
        return CompressionResult(texts=list(passages), tokens_in=n, tokens_out=n, seconds=0.0)


class _TokenizerCounter:
    """Stands in for llmlingua's tiktoken encoder (which downloads a file): counts with the LM's tokenizer."""

    def __init__(self, tokenizer: Any) -> None:
        self._tok = tokenizer

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids)


class _LegacyCacheModel:
    """llmlingua 0.2.2 slices `past_key_values` as [(k, v), ...]; transformers 5 speaks `Cache` objects.

    Wrapping the model converts at the boundary instead of editing site-packages.
    """

    def __init__(self, model: Any) -> None:
        self._model = model

    def __call__(self, *args: Any, past_key_values: Any = None, **kwargs: Any) -> Any:
        from transformers import Cache, DynamicCache

        if past_key_values is not None and not isinstance(past_key_values, Cache):
            past_key_values = DynamicCache(ddp_cache_data=[(k, v) for k, v in past_key_values])
        out = self._model(*args, past_key_values=past_key_values, **kwargs)
        if isinstance(out.past_key_values, Cache):
            out.past_key_values = [
                (layer.keys, layer.values)  # type: ignore[union-attr]
                for layer in out.past_key_values.layers
            ]
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)


def load_prompt_compressor(model: str, device: str) -> Any:
    """A llmlingua `PromptCompressor` that works offline under transformers 5."""
    from llmlingua import PromptCompressor  # heavy: keep inside the adapter

    class OfflinePromptCompressor(PromptCompressor):  # type: ignore[misc]
        def __init__(self, model_name: str, device_map: str) -> None:
            # Same as the parent minus tiktoken.encoding_for_model, which needs the network.
            self.model_name = model_name
            self.use_llmlingua2 = False
            self.retrieval_model = None
            self.retrieval_model_name = None
            self.open_api_config: dict[str, Any] = {}
            self.cache_bos_num = 10
            self.prefix_bos_num = 100
            self.load_model(model_name, device_map, {"trust_remote_code": False})
            self.oai_tokenizer = _TokenizerCounter(self.tokenizer)
            self.model: Any = _LegacyCacheModel(self.model)

    return OfflinePromptCompressor(model, device)


class LLMLinguaCompressor:
    """LLMLingua token-level compression, query-agnostic: each passage compressed alone, cached by content.

    Because the result does not depend on the question, a passage seen before costs nothing.
    """

    name = "llmlingua"
    query_aware = False

    def __init__(self, count_tokens: TokenCounter, prompt_compressor: Any, window: int = 16) -> None:
        self.count = count_tokens
        self.pc = prompt_compressor
        self.window = window
        self.cache: dict[str, str] = {}
        self.calls = 0

    def _one(self, passage: str, ratio: float) -> str:
        key = hashlib.sha256(f"{ratio:g}\x1f{passage}".encode()).hexdigest()
        if key not in self.cache:
            self.calls += 1
            out = self.pc.compress_prompt(
                [passage],
                rate=1.0 / ratio,
                use_context_level_filter=False,
                use_sentence_level_filter=False,
                iterative_size=self.window,
            )
            self.cache[key] = out["compressed_prompt"].strip()
        return self.cache[key]

    def compress(self, passages: Sequence[str], question: str, ratio: float) -> CompressionResult:
        start = time.perf_counter()
        texts = [self._one(p, ratio) for p in passages]
        return CompressionResult(
            texts=texts,
            tokens_in=sum(self.count(p) for p in passages),
            tokens_out=sum(self.count(t) for t in texts),
            seconds=time.perf_counter() - start,
        )


class LongLLMLinguaCompressor:
    """LongLLMLingua: question-conditioned passage ranking plus token pruning, per (question, context)."""

    name = "longllmlingua"
    query_aware = True
    separator = "\n\n"

    def __init__(
        self, count_tokens: TokenCounter, prompt_compressor: Any, window: int = 64, condition_compare: bool = False
    ) -> None:
        self.count = count_tokens
        self.pc = prompt_compressor
        self.window = window
        self.condition_compare = condition_compare
        self.calls = 0

    def compress(self, passages: Sequence[str], question: str, ratio: float) -> CompressionResult:
        start = time.perf_counter()
        self.calls += 1
        out = self.pc.compress_prompt(
            list(passages),
            question=question,
            rate=1.0 / ratio,
            condition_in_question="after_condition",
            reorder_context="original",
            dynamic_context_compression_ratio=0.3,
            condition_compare=self.condition_compare,
            rank_method="longllmlingua",
            context_budget="+100",
            use_sentence_level_filter=False,
            concate_question=False,
            iterative_size=self.window,
        )
        texts = [t.strip() for t in out["compressed_prompt"].split(self.separator) if t.strip()]
        return CompressionResult(
            texts=texts,
            tokens_in=sum(self.count(p) for p in passages),
            tokens_out=sum(self.count(t) for t in texts),
            seconds=time.perf_counter() - start,
        )


def build_compressors(
    names: Sequence[str], count_tokens: TokenCounter, model: str | None, config: CompressorConfig
) -> dict[str, Compressor]:
    """Build the named compressors; the llmlingua pair share one compressor LM."""
    known = {"none", "llmlingua", "longllmlingua"}
    unknown = sorted(set(names) - known)
    if unknown:
        raise CribsheetError(f"unknown compressor(s) {unknown}; known: {sorted(known)}")
    out: dict[str, Compressor] = {}
    pc = None
    for name in names:
        if name == "none":
            out[name] = NoCompressor(count_tokens)
            continue
        if pc is None:
            if model is None:
                raise CribsheetError("compressor model path is required for llmlingua compressors")
            pc = load_prompt_compressor(model, config.device)
        if name == "llmlingua":
            out[name] = LLMLinguaCompressor(count_tokens, pc, window=config.agnostic_window)
        else:
            out[name] = LongLLMLinguaCompressor(
                count_tokens, pc, window=config.aware_window, condition_compare=config.aware_condition_compare
            )
    return out
