"""Fake backends implementing the real Protocols, registered by name like the real ones (for fast tests)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from corpus.embed import EMBEDDERS, Embedder
from eval.compress import COMPRESSORS, CachedAgnosticCompressor, CompressionResult, Compressor, CompressorDeps
from eval.compress.cache import CompressionCache
from eval.engine.generator import GENERATORS, Generation, Generator, GeneratorDeps, Probe, Schemas, WarmReport


def count_words(text: str) -> int:
    return len(text.split())


class WordTokenizer:
    """Enough of a tokenizer for PromptLayout: a plain chat template."""

    def apply_chat_template(
        self, messages: list[dict[str, str]], tokenize: bool = False, add_generation_prompt: bool = True
    ) -> str:
        return "".join(f"<{m['role']}>{m['content']}</{m['role']}>" for m in messages) + "<assistant>"


class ExtractingGenerator:
    """Answers with the first passage's first sentence; counts prompts; caches the shared prefix."""

    name = "fake"

    def __init__(self, fail: bool = False, stall_file: str | None = None, stall_s: float = 0.0) -> None:
        self.tokenizer = WordTokenizer()
        self.stall_file = stall_file
        self.stall_s = stall_s
        self.batches: list[list[str]] = []
        self.schemas: list[Schemas] = []  # what each batch was held to
        self.fail = fail
        self.prefix = ""
        self.resets = 0
        self.probes: list[str] = []
        self.since_reset: list[str] = []  # probe prompts the cache holds (like vLLM's, until a reset)
        self.closed = False

    def count_tokens(self, text: str) -> int:
        return count_words(text)

    def warm(self, prefix: str) -> WarmReport:
        self.prefix = prefix
        n = count_words(prefix)
        return WarmReport(prefix_tokens=n, cached_tokens=n, cold_ttft_s=0.2, warm_ttft_s=0.02)

    def reset_cache(self) -> None:
        # A reset forgets the prefix too: a sweep that forgot to warm again gets no cached tokens.
        self.resets += 1
        self.prefix = ""
        self.since_reset = []

    def close(self) -> None:
        self.closed = True

    def probe(self, prompt: str, json_schema: dict[str, Any] | None = None) -> Probe:
        self.probes.append(prompt)
        n = count_words(prompt)
        cached = count_words(self.prefix) if prompt.startswith(self.prefix) else 0
        for earlier in self.since_reset:  # an earlier probe's prompt shares its leading words: served cached
            shared = os.path.commonprefix([prompt, earlier])
            if len(shared) > len(self.prefix):
                cached = max(cached, count_words(shared))
        self.since_reset.append(prompt)
        return Probe(
            prompt_tokens=n,
            cached_tokens=cached,
            ttft_s=0.001 * n,
            prefill_s=0.001 * (n - cached) + 1e-6 * (n - cached) ** 2,
            decode_s=0.01,
            output_tokens=3,
        )

    def generate(self, prompts: Sequence[str], json_schema: Schemas = None) -> list[Generation]:
        if self.fail:
            raise RuntimeError("engine died")
        if self.stall_file and not self.batches:  # mid-flow: says so, then takes its time (a fault's window)
            Path(self.stall_file).touch()
            time.sleep(self.stall_s)
        self.batches.append(list(prompts))
        self.schemas.append(json_schema)
        outs = []
        for p in prompts:
            m = re.search(r"\[1\] (?:[^:\n]+: )?([^.\n]*)", p)
            cached = count_words(self.prefix) if p.startswith(self.prefix) else 0
            text = m.group(1) if m else "I don't know"
            if json_schema is not None:  # cites the passage it answered from
                text = json.dumps({"answer": text, "citations": [1] if m else []})
            outs.append(
                Generation(
                    text=text,
                    prompt_tokens=count_words(p),
                    cached_tokens=cached,
                    ttft_s=0.001 * count_words(p),
                )
            )
        return outs


class CpuBoundGenerator(ExtractingGenerator):
    """The extracting fake whose probe does real work: a pure-Python loop per prompt word, timed by the wall
    clock, so another process on the same cores slows it as it slows a CPU engine's prefill."""

    name = "fake-cpu"
    LOOPS_PER_WORD = 40_000

    def probe(self, prompt: str, json_schema: dict[str, Any] | None = None) -> Probe:
        p = super().probe(prompt, json_schema)
        start = time.perf_counter()
        for _ in range(self.LOOPS_PER_WORD * (p.prompt_tokens - p.cached_tokens)):  # prefill: the uncached words
            pass
        return p.model_copy(update={"ttft_s": time.perf_counter() - start})


class HalvingCompressor(CachedAgnosticCompressor):
    """Keeps every other word; query-agnostic and cached like the real ones; can fail on a question."""

    name = "halving"

    def __init__(self, fail_on: str | None = None, cache: CompressionCache | None = None, delay_s: float = 0.0) -> None:
        super().__init__(count_words, cache)
        self.fail_on = fail_on
        self.delay_s = delay_s
        self.compressed: list[str] = []

    def compress(self, passages: Sequence[str], question: str, ratio: float) -> CompressionResult:
        if self.fail_on and self.fail_on in question:
            raise ValueError("cannot compress this one")
        return super().compress(passages, question, ratio)

    def _compress_many(self, passages: list[str], ratio: float) -> list[str]:
        self.compressed.extend(passages)
        time.sleep(self.delay_s * len(passages))  # a compressor that costs something, per passage
        return [" ".join(p.split()[::2]) for p in passages]


class HashEmbedder:
    """Deterministic bag-of-words vectors from sha256: a real backend for tests, no model needed."""

    def __init__(self, dim: int = 64) -> None:
        self.name = f"hash-{dim}"
        self.dim = dim

    def _one(self, text: str) -> np.ndarray:
        vec = np.zeros(self.dim, dtype=np.float32)
        for word in text.lower().split():
            h = int.from_bytes(hashlib.sha256(word.strip(".,;:!?\"'()").encode()).digest()[:8], "little")
            vec[h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
        norm = float(np.linalg.norm(vec))
        return vec / norm if norm else vec

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self._one(t) for t in texts]) if texts else np.zeros((0, self.dim), np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return self._one(text)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(t.split()) for t in texts]


class ContextualHashEmbedder(HashEmbedder):
    """The hash embedder with contextual span pooling: a sentence's vector is its own hash plus its chunk's,
    so a sentence two chunks share gets two different vectors (as with a real model's late chunking)."""

    name = "span-hash"

    def embed_documents_with_spans(
        self, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]]
    ) -> tuple[np.ndarray, list[list[np.ndarray | None]], float]:
        docs = np.stack([self._one(t) for t in texts])
        pooled: list[list[np.ndarray | None]] = [
            [self._one(t[lo:hi]) + docs[i] for lo, hi in spans[i]] for i, t in enumerate(texts)
        ]
        return docs, pooled, 0.0


class CountingEmbedder(HashEmbedder):
    """A hash embedder that counts the texts it embeds as documents."""

    def __init__(self) -> None:
        super().__init__()
        self.documents_embedded = 0

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.documents_embedded += len(texts)
        return super().embed_documents(texts)


class HashEmbedderConfig(BaseModel):
    """Dimension of the hash embedder."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dim: int = Field(default=64, ge=2)


class FakeGeneratorConfig(BaseModel):
    """Options of the fake generator."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    fail: bool = False
    model: str | None = None
    """A weights folder the fake names and never reads (what the run identity must still see)."""


class HalvingConfig(BaseModel):
    """Options of the halving compressor."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    fail_on: str | None = None


@EMBEDDERS.register("hash", HashEmbedderConfig)
def _hash(config: HashEmbedderConfig, deps: None) -> Embedder:
    """sha256 bag of words (tests only)."""
    return HashEmbedder(config.dim)


@EMBEDDERS.register("span-hash", HashEmbedderConfig)
def _span_hash(config: HashEmbedderConfig, deps: None) -> Embedder:
    """sha256 bag of words with contextual span pooling (tests only)."""
    return ContextualHashEmbedder(config.dim)


@GENERATORS.register("fake", FakeGeneratorConfig)
def _fake_generator(config: FakeGeneratorConfig, deps: GeneratorDeps) -> Generator:
    """Answers with the first passage's first clause (tests only)."""
    return ExtractingGenerator(fail=config.fail)


@GENERATORS.register("fake-cpu", FakeGeneratorConfig)
def _cpu_generator(config: FakeGeneratorConfig, deps: GeneratorDeps) -> Generator:
    """The fake whose probe's TTFT is real CPU work, timed (tests and the fault suite only)."""
    return CpuBoundGenerator()


@GENERATORS.register("fake-dead", FakeGeneratorConfig)
def _dead_generator(config: FakeGeneratorConfig, deps: GeneratorDeps) -> Generator:
    """An engine that died: every batch raises (tests and the fault suite only)."""
    return ExtractingGenerator(fail=True)


@GENERATORS.register("fake-stall", FakeGeneratorConfig)
def _stalling_generator(config: FakeGeneratorConfig, deps: GeneratorDeps) -> Generator:
    """The fake that, at its first batch, touches the file named by CRIBSHEET_FAKE_STALL_FILE and waits 5 s:
    a window in which the fault suite breaks something mid-flow (tests and the fault suite only).
    """
    return ExtractingGenerator(stall_file=os.environ["CRIBSHEET_FAKE_STALL_FILE"], stall_s=5.0)


@COMPRESSORS.register("halving", HalvingConfig)
def _halving(config: HalvingConfig, deps: CompressorDeps) -> Compressor:
    """Keeps every other word (tests only)."""
    return HalvingCompressor(fail_on=config.fail_on, cache=deps.cache)


class WordIdTokenizer(WordTokenizer):
    """Whitespace words as tokens with ids and character offsets: enough for the likelihood verifier."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}

    def _words(self, text: str) -> list[re.Match[str]]:
        return list(re.finditer(r"\S+", text))

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [self.vocab.setdefault(m.group(), len(self.vocab)) for m in self._words(text)]

    def __call__(
        self, text: str, add_special_tokens: bool = False, return_offsets_mapping: bool = False
    ) -> dict[str, Any]:
        words = self._words(text)
        out: dict[str, Any] = {"input_ids": [self.vocab.setdefault(m.group(), len(self.vocab)) for m in words]}
        if return_offsets_mapping:
            out["offset_mapping"] = [m.span() for m in words]
        return out


def copy_logprobs(token_ids: Sequence[Sequence[int]]) -> list[list[float | None]]:
    """A language model that finds a word likely (-0.5) when it appeared earlier in the sequence, else not
    (-5.0): an answer copied from its passages is likelier with them than without."""
    rows: list[list[float | None]] = []
    for ids in token_ids:
        row: list[float | None] = [None]
        row += [-0.5 if tok in ids[:i] else -5.0 for i, tok in enumerate(ids) if i > 0]
        rows.append(row)
    return rows


class ScoringGenerator(ExtractingGenerator):
    """The extracting fake that also scores prompt tokens (a `TokenScorer`), by `copy_logprobs`."""

    def __init__(self) -> None:
        super().__init__()
        self.tokenizer = WordIdTokenizer()
        self.scored = 0

    def token_logprobs(self, token_ids: Sequence[Sequence[int]]) -> list[list[float | None]]:
        self.scored += len(token_ids)
        return copy_logprobs(token_ids)


@GENERATORS.register("fake-scoring", FakeGeneratorConfig)
def _scoring_generator(config: FakeGeneratorConfig, deps: GeneratorDeps) -> Generator:
    """The fake that also scores prompt tokens (tests of the likelihood verifier only)."""
    return ScoringGenerator()
