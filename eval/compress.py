"""Compressors behind one Protocol: none, LLMLingua (query-agnostic), LongLLMLingua (query-aware)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from corpus.chunk import sentence_spans
from corpus.embed import Embedder, VectorCache, auto_cpu_precision
from corpus.errors import CribsheetError
from eval.compress_cache import CompressionCache, MemoryCache, cache_key
from eval.generate import TokenScorer
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
    calls: int = 0
    """Compressor model invocations made for this context (0: everything came from the cache)."""
    kept: list[int] | None = None
    """Indices of the input passages that `texts` correspond to (None: unknown or all)."""

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


class CachedAgnosticCompressor:
    """Base of query-agnostic compressors: each passage is compressed alone, once, and cached by content.

    Because the result does not depend on the question, a passage seen before costs nothing: with a
    persistent cache, not even in the next run.
    """

    name = "agnostic"
    query_aware = False

    def __init__(self, count_tokens: TokenCounter, cache: CompressionCache | None = None) -> None:
        self.count = count_tokens
        self.cache: CompressionCache = cache or MemoryCache()
        self.calls = 0

    def _compress_many(self, passages: list[str], ratio: float) -> list[str]:
        raise NotImplementedError

    def compress(self, passages: Sequence[str], question: str, ratio: float) -> CompressionResult:
        start = time.perf_counter()
        keys = [cache_key(self.name, ratio, p) for p in passages]
        found = {k: self.cache.get(k) for k in keys}
        missing = list(dict.fromkeys(p for p, k in zip(passages, keys, strict=True) if found[k] is None))
        if missing:
            self.calls += len(missing)
            fresh = dict(
                zip((cache_key(self.name, ratio, p) for p in missing), self._compress_many(missing, ratio), strict=True)
            )
            self.cache.put_many(fresh)
            found.update(fresh)
        texts = [found[k] or "" for k in keys]
        return CompressionResult(
            texts=texts,
            tokens_in=sum(self.count(p) for p in passages),
            tokens_out=sum(self.count(t) for t in texts),
            seconds=time.perf_counter() - start if missing else 0.0,
            calls=len(missing),
        )


class LLMLinguaCompressor(CachedAgnosticCompressor):
    """LLMLingua token-level compression (llmlingua's own transformers passes), query-agnostic."""

    name = "llmlingua"

    def __init__(
        self,
        count_tokens: TokenCounter,
        prompt_compressor: Any,
        window: int = 16,
        cache: CompressionCache | None = None,
    ) -> None:
        super().__init__(count_tokens, cache)
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
    ) -> None:
        super().__init__(count_tokens, cache)
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


class ExtractiveCompressor:
    """Query-aware sentence selection by embedder similarity to the question: an embedder-sized scorer.

    Keeps the sentences most similar to the question until the token budget is met, in their original
    order; passages with no kept sentence are dropped (`kept` says which remain). Sentence vectors do not
    depend on the question, so they are kept (by sentence text) and a passage seen before costs only the
    question's embedding and a dot product.
    """

    name = "extractive"
    query_aware = True

    def __init__(self, count_tokens: TokenCounter, embedder: Embedder, max_cached: int = 200_000) -> None:
        self.count = count_tokens
        self.embedder = embedder
        self.calls = 0
        self._sentence_vectors = VectorCache(embedder, max_cached)

    def compress(self, passages: Sequence[str], question: str, ratio: float) -> CompressionResult:
        import numpy as np

        start = time.perf_counter()
        self.calls += 1
        sentences = [(pi, p[s:e]) for pi, p in enumerate(passages) for s, e, _ in sentence_spans(p)]
        tokens_in = sum(self.count(p) for p in passages)
        if not sentences:
            return CompressionResult(texts=[], tokens_in=tokens_in, tokens_out=0, seconds=0.0, calls=1, kept=[])
        sizes = [self.count(s) for _, s in sentences]
        sims = self._sentence_vectors([s for _, s in sentences]) @ self.embedder.embed_query(question)
        budget = max(1, round(tokens_in / ratio))
        chosen: set[int] = set()
        used = 0
        for i in np.argsort(-sims, kind="stable"):
            if chosen and used + sizes[i] > budget:
                continue  # try shorter sentences further down; stop only when the budget is exhausted
            chosen.add(int(i))
            used += sizes[i]
            if used >= budget:
                break
        texts: list[str] = []
        kept: list[int] = []
        for pi in range(len(passages)):
            picked = [s for i, (p, s) in enumerate(sentences) if p == pi and i in chosen]
            if picked:
                texts.append(" ".join(picked))
                kept.append(pi)
        return CompressionResult(
            texts=texts,
            tokens_in=tokens_in,
            tokens_out=sum(self.count(t) for t in texts),
            seconds=time.perf_counter() - start,
            calls=1,
            kept=kept,
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


@dataclass
class CompressorContext:
    """What compressors may need; expensive pieces are built on first use and shared."""

    count_tokens: TokenCounter
    config: CompressorConfig
    model: str | None = None
    """Compressor LM folder or hub id (llmlingua pair)."""
    embedder: Embedder | None = None
    scorer: TokenScorer | None = None
    """vLLM engine that scores tokens (engine-lingua): the generator's, or one for the compressor LM."""
    cache: CompressionCache | None = None
    _prompt_compressor: Any = None

    def prompt_compressor(self) -> Any:
        if self._prompt_compressor is None:
            if self.model is None:
                raise CribsheetError("a compressor model (folder or hub id) is needed for llmlingua compressors")
            self._prompt_compressor = load_prompt_compressor(self.model, self.config.device, self.config.dtype)
        return self._prompt_compressor

    def need(self, what: str) -> Any:
        value = getattr(self, what)
        if value is None:
            raise CribsheetError(f"this compressor needs a {what}, and none was configured")
        return value


COMPRESSORS: dict[str, Callable[[CompressorContext], Compressor]] = {
    "none": lambda c: NoCompressor(c.count_tokens),
    "llmlingua": lambda c: LLMLinguaCompressor(
        c.count_tokens, c.prompt_compressor(), window=c.config.agnostic_window, cache=c.cache
    ),
    "longllmlingua": lambda c: LongLLMLinguaCompressor(
        c.count_tokens,
        c.prompt_compressor(),
        window=c.config.aware_window,
        condition_compare=c.config.aware_condition_compare,
    ),
    "engine-lingua": lambda c: EngineLinguaCompressor(c.count_tokens, c.need("scorer"), cache=c.cache),
    "extractive": lambda c: ExtractiveCompressor(c.count_tokens, c.need("embedder")),
}


def build_compressors(names: Sequence[str], context: CompressorContext) -> dict[str, Compressor]:
    """Build the named compressors from the registry; the llmlingua pair share one compressor LM."""
    unknown = sorted(set(names) - set(COMPRESSORS))
    if unknown:
        raise CribsheetError(f"unknown compressor(s) {unknown}; known: {sorted(COMPRESSORS)}")
    return {name: COMPRESSORS[name](context) for name in names}
