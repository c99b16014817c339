"""The llmlingua family (LLMLingua query-agnostic, LongLLMLingua query-aware) and the shims that let
llmlingua 0.2.2 run offline under transformers 5.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from corpus.embed import auto_cpu_precision
from eval.compress.base import (
    COMPRESSORS,
    CachedAgnosticCompressor,
    CompressionResult,
    Compressor,
    CompressorDeps,
    TokenCounter,
    align_kept,
)
from eval.compress.cache import CompressionCache
from eval.compress.identity import code_version, compressor_identity


class LinguaLMConfig(BaseModel):
    """The compressor LM of the llmlingua family (separate from the generator)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str | None = None
    """Hugging Face folder or hub id; None = the bundled SmolLM2-135M-Instruct."""
    device: str = "cpu"
    """torch device of the compressor LM."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Weights of the compressor LM. auto: the model's own dtype on a GPU; on a CPU bfloat16 where the CPU
    computes it natively (AVX512-BF16 or AMX; 2-3x faster than float32 for a 135M model, which is
    memory-bound at llmlingua's 16-64-token windows), else float32 (llmlingua's own CPU default)."""


class LLMLinguaConfig(LinguaLMConfig):
    """LLMLingua per passage."""

    agnostic_window: int = 16
    """llmlingua `iterative_size` for per-passage compression: llmlingua 0.2.2 leaves the tail after the
    last full window uncompressed, so short passages need a small window to reach the requested ratio."""


class LongLLMLinguaConfig(LinguaLMConfig):
    """LongLLMLingua over a whole context."""

    aware_window: int = 64
    """llmlingua `iterative_size` for LongLLMLingua over a whole context."""
    aware_condition_compare: bool = False
    """Contrastive perplexity (a second pass without the question): ~1.5x the cost."""


class _TokenizerCounter:
    """Stands in for llmlingua's tiktoken encoder (which downloads a file): counts with the LM's tokenizer."""

    def __init__(self, tokenizer: Any) -> None:
        self._tok = tokenizer

    def encode(self, text: str) -> list[int]:
        """Token ids without special tokens."""
        return list(self._tok.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        """Text of token ids."""
        return str(self._tok.decode(ids))


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
            layers = out.past_key_values.layers
            out.past_key_values = [(layer.keys, layer.values) for layer in layers]  # type: ignore[union-attr]
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)


def compressor_dtype(dtype: str, device: str) -> Any:
    """The torch dtype for the compressor LM (see `CompressorConfig.dtype`)."""
    import torch

    precision = dtype if dtype != "auto" else auto_cpu_precision(device)
    return getattr(torch, precision) if precision else "auto"  # "auto": the model's own dtype, on a GPU


def load_prompt_compressor(model: str, device: str, dtype: str = "auto") -> Any:
    """A llmlingua `PromptCompressor` that works offline under transformers 5."""
    from llmlingua import PromptCompressor  # heavy: keep inside the adapter

    torch_dtype = compressor_dtype(dtype, device)

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
            self.load_model(model_name, device_map, {"trust_remote_code": False, "torch_dtype": torch_dtype})
            self.oai_tokenizer = _TokenizerCounter(self.tokenizer)
            self.model: Any = _LegacyCacheModel(self.model)

    return OfflinePromptCompressor(model, device)


class LLMLinguaCompressor(CachedAgnosticCompressor):
    """LLMLingua token-level compression (llmlingua's own transformers passes), query-agnostic."""

    name = "llmlingua"

    def __init__(
        self,
        count_tokens: TokenCounter,
        prompt_compressor: Any,
        window: int = 16,
        cache: CompressionCache | None = None,
        identity: str = "",
    ) -> None:
        super().__init__(count_tokens, cache, identity)
        self.pc = prompt_compressor
        self.window = window

    def _compress_many(self, passages: list[str], ratio: float) -> list[str]:
        out = []
        for passage in passages:
            res = self.pc.compress_prompt(
                [passage],
                rate=1.0 / ratio,
                use_context_level_filter=False,
                use_sentence_level_filter=False,
                iterative_size=self.window,
            )
            out.append(res["compressed_prompt"].strip())
        return out


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
        """Rank the passages by question-conditioned perplexity and prune tokens of the whole context."""
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
            kept=list(range(len(passages))) if len(texts) == len(passages) else align_kept(passages, texts),
            tokens_in=sum(self.count(p) for p in passages),
            tokens_out=sum(self.count(t) for t in texts),
            seconds=time.perf_counter() - start,
        )

    def flush(self) -> None:
        """Nothing cached: the result depends on the question."""


@COMPRESSORS.register("llmlingua", LLMLinguaConfig)
def _llmlingua(config: LLMLinguaConfig, deps: CompressorDeps) -> Compressor:
    """LLMLingua per passage, query-agnostic, cached by content."""
    model = config.model or deps.default_model
    pc = deps.prompt_compressor(config.model, config.device, config.dtype, load_prompt_compressor)
    # The dtype it runs at here, not "auto": a bfloat16 machine's compressions (and timings) are not a
    # float32 machine's.
    resolved = config.model_dump() | {
        "dtype": str(compressor_dtype(config.dtype, config.device)).removeprefix("torch.")
    }
    identity = compressor_identity(
        "llmlingua", resolved, model, code_version(LLMLinguaCompressor, CachedAgnosticCompressor)
    )
    return LLMLinguaCompressor(deps.count_tokens, pc, config.agnostic_window, deps.cache, identity)


@COMPRESSORS.register("longllmlingua", LongLLMLinguaConfig)
def _longllmlingua(config: LongLLMLinguaConfig, deps: CompressorDeps) -> Compressor:
    """LongLLMLingua over the whole context, query-aware."""
    pc = deps.prompt_compressor(config.model, config.device, config.dtype, load_prompt_compressor)
    return LongLLMLinguaCompressor(
        deps.count_tokens, pc, window=config.aware_window, condition_compare=config.aware_condition_compare
    )
