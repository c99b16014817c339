"""The compressor boundary: the Protocol, its result, the registry and the dependencies factories receive."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from corpus.embed import Embedder
from corpus.errors import CribsheetError
from corpus.registry import NoConfig, Registry
from eval.compress.cache import Cached, CompressionCache, MemoryCache, cache_key
from eval.engine.generator import TokenScorer


class CompressionResult(BaseModel):
    """What a compressor did to one context, tokens counted with the generator's tokenizer."""

    model_config = ConfigDict(frozen=True)

    texts: list[str]
    """Compressed passages in prompt order (a query-aware compressor may drop some)."""
    tokens_in: int
    tokens_out: int
    seconds: float
    """Paid cost: wall time this request spent in the compressor, cache lookups included."""
    cold_seconds: float | None = None
    """Cold cost: what computing this context's compression costs without any cache (the cached passages'
    costs as measured when they were computed); None: same as `seconds` (no cache involved)."""
    calls: int = 0
    """Compressor model invocations made for this context (0: everything came from the cache)."""
    kept: list[int] | None = None
    """Indices of the input passages that `texts` correspond to (None: unknown or all)."""
    offline_seconds: float | None = None
    """Stored cost of work this request relied on but did not do (`pruned`: its units' index-time vectors),
    as measured when that work was done; reported beside a live bill, never added to it. None: none."""

    @property
    def ratio(self) -> float:
        """Realized ratio tokens_in / tokens_out (inf when nothing is left)."""
        return self.tokens_in / self.tokens_out if self.tokens_out else float("inf")


def align_kept(passages: Sequence[str], texts: Sequence[str]) -> list[int] | None:
    """Which input passage each compressed text came from, when a compressor drops whole passages and keeps
    the others in order (LongLLMLingua): the monotone matching that maximises the words each compressed text
    shares with its passage. None when there are more texts than passages (a passage was split).
    """
    if len(texts) > len(passages):
        return None
    words = [set(p.lower().split()) for p in passages]
    share = [[len(set(t.lower().split()) & w) for w in words] for t in texts]
    n, m = len(texts), len(passages)
    best = [[0.0] * (m + 1) for _ in range(n + 1)]  # best[j][i]: texts[:j] matched within passages[:i]
    for j in range(1, n + 1):
        best[j][j - 1] = float("-inf")
        for i in range(j, m + 1):
            best[j][i] = max(best[j][i - 1], best[j - 1][i - 1] + share[j - 1][i - 1])
    kept, i = [], m
    for j in range(n, 0, -1):
        while best[j][i] == best[j][i - 1] and i > j:
            i -= 1
        kept.append(i - 1)
        i -= 1
    return kept[::-1]


TokenCounter = Callable[[str], int]
"""Counts the tokens of one text with the generator's tokenizer."""


class Compressor(Protocol):
    """Shrinks the passages of one context to about 1/ratio of their tokens."""

    name: str
    query_aware: bool

    def compress(self, passages: Sequence[str], question: str, ratio: float) -> CompressionResult:
        """Compress `passages` for `question` to about 1/ratio of their tokens."""
        ...

    def flush(self) -> None:
        """Persist whatever the compressor cached since the last flush (called once per setting)."""
        ...


PromptCompressorLoader = Callable[[str, str, str], Any]
"""(model, device, dtype) -> a llmlingua PromptCompressor."""


@dataclass
class CompressorDeps:
    """The live objects a compressor factory may use; each factory asks for what it needs by attribute."""

    count_tokens: TokenCounter
    default_model: str | None = None
    """Compressor LM used when a compressor's config names none (the bundled SmolLM2)."""
    embedder: Embedder | None = None
    scorer: TokenScorer | None = None
    """vLLM engine that scores tokens (engine-lingua): the generator's, or one for the compressor LM."""
    scorer_model: str | None = None
    """The model the scorer runs (part of engine-lingua's cache identity)."""
    cache: CompressionCache | None = None
    index_path: Path | None = None
    """The LanceDB index folder (the `pruned` compressors read its stored sentence vectors)."""
    index_version: int | None = None
    """The chunk version the sweep pinned: the `pruned` compressors read the side tables of that snapshot."""
    load_prompt_compressor: PromptCompressorLoader | None = None
    """Overrides how the llmlingua LM is loaded (tests)."""
    _loaded: dict[tuple[str, str, str], Any] = field(default_factory=dict)

    def prompt_compressor(self, model: str | None, device: str, dtype: str, load: PromptCompressorLoader) -> Any:
        """The llmlingua LM for (model, device, dtype), loaded once (by `load`, unless these deps carry their
        own loader) and shared by the llmlingua family.
        """
        name = model or self.default_model
        if name is None:
            raise CribsheetError("a compressor model (folder or hub id) is needed for llmlingua compressors")
        key = (name, device, dtype)
        if key not in self._loaded:
            self._loaded[key] = (self.load_prompt_compressor or load)(name, device, dtype)
        return self._loaded[key]


def uncached(compressor: Compressor, precomputed: bool = False) -> Compressor:
    """The compressor as a first request meets it, for the latency phase's live slots: a twin whose caches
    are empty (the extractive selector's sentence vectors; a query-agnostic compressor's per-passage
    compressions, so its model runs for this request), its models shared; the compressor itself when it
    keeps none. `precomputed`: an explicit, recorded precompute step (`cribsheet precompress`) compressed
    every chunk of the index, so a request reads those compressions and the step's bill is shown beside it.
    """
    if precomputed:
        return compressor
    twin = getattr(compressor, "uncached", None)
    return twin() if callable(twin) else compressor


COMPRESSORS: Registry[Compressor, CompressorDeps] = Registry("compressor")
"""Registered compressors; `Setting.compressor` names one."""


class NoCompressor:
    """Identity: the baseline."""

    name = "none"
    query_aware = False

    def __init__(self, count_tokens: TokenCounter) -> None:
        self.count = count_tokens

    def compress(self, passages: Sequence[str], question: str, ratio: float) -> CompressionResult:
        """The passages unchanged, with their token count."""
        n = sum(self.count(p) for p in passages)
        return CompressionResult(texts=list(passages), tokens_in=n, tokens_out=n, seconds=0.0)

    def flush(self) -> None:
        """Nothing cached."""


@COMPRESSORS.register("none", NoConfig)
def _none(config: NoConfig, deps: CompressorDeps) -> Compressor:
    """No compression: the baseline."""
    return NoCompressor(deps.count_tokens)


class CachedAgnosticCompressor:
    """Base of query-agnostic compressors: each passage is compressed alone, once, and cached by content.

    Because the result does not depend on the question, a passage seen before costs nothing to this request
    (its paid cost); its cold cost, kept with the cached entry, still counts what computing it cost, so the
    bill of a setting does not depend on which settings ran before it or on an earlier run.
    """

    name = "agnostic"
    query_aware = False

    def __init__(self, count_tokens: TokenCounter, cache: CompressionCache | None = None, identity: str = "") -> None:
        self.count = count_tokens
        self.cache: CompressionCache = cache or MemoryCache()
        self.identity = identity or self.name
        """Content address of this compressor (name, config, model and weights, code): part of every key."""
        self.calls = 0

    def _compress_many(self, passages: list[str], ratio: float) -> list[str]:
        raise NotImplementedError

    def compress(self, passages: Sequence[str], question: str, ratio: float) -> CompressionResult:
        """Compress each passage alone, reusing cached ones; the question is ignored."""
        start = time.perf_counter()
        keys = [cache_key(self.identity, ratio, p) for p in passages]
        found = self.cache.get_many(keys)  # one read for the whole context, not one per passage
        missing = list(dict.fromkeys(p for p, k in zip(passages, keys, strict=True) if found[k] is None))
        tokens = {p: self.count(p) for p in dict.fromkeys(passages)}  # each passage tokenized once
        if missing:
            self.calls += len(missing)
            t0 = time.perf_counter()
            texts = self._compress_many(missing, ratio)
            spent = time.perf_counter() - t0
            # A batch's time is shared by its passages in proportion to their tokens.
            sizes = [max(tokens[p], 1) for p in missing]
            fresh = {
                cache_key(self.identity, ratio, p): Cached(t, spent * n / sum(sizes))
                for p, t, n in zip(missing, texts, sizes, strict=True)
            }
            self.cache.put_many(fresh)
            found.update(fresh)
        entries = [found[k] for k in keys]
        out = [e.text if e else "" for e in entries]
        fresh_keys = {cache_key(self.identity, ratio, p) for p in missing}
        # Query-agnostic compressions are precomputed work a request reads, not does (index time, or the first
        # request that met the passage): what they cost is offline, reported beside the live bill.
        offline = sum(e.seconds for k, e in zip(keys, entries, strict=True) if e and k not in fresh_keys)
        return CompressionResult(
            texts=out,
            tokens_in=sum(tokens[p] for p in passages),
            tokens_out=sum(self.count(t) for t in out),
            seconds=time.perf_counter() - start,
            cold_seconds=sum(e.seconds for e in entries if e),
            calls=len(missing),
            offline_seconds=offline or None,
        )

    def flush(self) -> None:
        """Persist new cache entries (one write per setting, not one per passage)."""
        self.cache.flush()

    def uncached(self) -> CachedAgnosticCompressor:
        """A twin with an empty cache of its own and the same model: every passage compressed for this
        request, as a first request that no precompute step served pays it.
        """
        twin = copy.copy(self)
        twin.cache = MemoryCache()
        twin.calls = 0
        return twin
