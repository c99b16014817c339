"""Frozen settings and the grid that expands into them."""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from eval.judge import JudgeConfig

RetrievalMode = Literal["hybrid", "vector", "fts"]


def stable_hash(model: BaseModel, length: int = 16) -> str:
    """sha256 of a model's canonical JSON: the same config gives the same hash in every process."""
    payload = json.dumps(model.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()[:length]


class Setting(BaseModel):
    """One point of the grid: how the crib sheet for a question is built."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    top_k: int = Field(ge=1)
    """Chunks kept after reranking."""
    retrieval: RetrievalMode = "hybrid"
    """Candidate retrieval: vector + full-text fused by reciprocal rank, or one of them alone."""
    layout: Literal["ranked", "edges"] = "ranked"
    """Passage order in the prompt: best first, or best at both edges (small models lose the middle)."""
    reranker: str = "dense"
    """Registered reranker name."""
    compressor: str = "none"
    """Registered compressor name: none, llmlingua (query-agnostic), longllmlingua (query-aware)."""
    target_ratio: float = Field(default=1.0, ge=1.0)
    """Requested compression ratio tokens_in / tokens_out (1.0 = no compression)."""

    @model_validator(mode="after")
    def _ratio_matches_compressor(self) -> Setting:
        if self.compressor == "none" and self.target_ratio != 1.0:
            raise ValueError("compressor 'none' needs target_ratio 1.0")
        if self.compressor != "none" and self.target_ratio <= 1.0:
            raise ValueError(f"compressor '{self.compressor}' needs target_ratio > 1")
        return self

    @property
    def name(self) -> str:
        """Readable unique name, e.g. `llmlingua-4x-k8`."""
        comp = "none" if self.compressor == "none" else f"{self.compressor}-{self.target_ratio:g}x"
        name = f"{comp}-k{self.top_k}-{self.retrieval}-{self.reranker}"
        return name if self.layout == "ranked" else f"{name}-{self.layout}"

    def config_hash(self) -> str:
        """Stable hash of this setting."""
        return stable_hash(self)


class CompressionSpec(BaseModel):
    """A compressor at a requested ratio."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    compressor: str = "none"
    target_ratio: float = 1.0


class GridConfig(BaseModel):
    """Cross product of compressions × top-k × rerankers."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    compressions: list[CompressionSpec] = Field(
        default_factory=lambda: [
            CompressionSpec(),
            CompressionSpec(compressor="llmlingua", target_ratio=4.0),
            CompressionSpec(compressor="longllmlingua", target_ratio=4.0),
        ]
    )
    top_ks: list[int] = Field(default_factory=lambda: [3, 8])
    rerankers: list[str] = Field(default_factory=lambda: ["dense"])
    retrievals: list[RetrievalMode] = Field(default_factory=lambda: list[RetrievalMode](["hybrid"]))
    layouts: list[Literal["ranked", "edges"]] = Field(
        default_factory=lambda: list[Literal["ranked", "edges"]](["ranked"])
    )

    def expand(self) -> list[Setting]:
        """Every setting of the grid, in a stable order."""
        return [
            Setting(top_k=k, reranker=r, retrieval=m, layout=lay, compressor=c.compressor, target_ratio=c.target_ratio)
            for c, k, m, r, lay in itertools.product(
                self.compressions, self.top_ks, self.retrievals, self.rerankers, self.layouts
            )
        ]


class GeneratorConfig(BaseModel):
    """The vLLM engine and sampling; any field can point at a GPU model without code changes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str | None = None
    """Hugging Face folder or hub id; None = the bundled SmolLM2-135M-Instruct (converted once)."""
    dtype: str = "bfloat16"
    max_model_len: int = 4096
    block_size: int | None = 32
    """KV block size; the prefix cache hits whole blocks only (CPU needs a multiple of 32)."""
    enforce_eager: bool = True
    """Skip graph compilation (CPU: ~26 s load vs ~100 s, prefill within ~10%)."""
    gpu_memory_utilization: float = 0.5
    kv_cache_gib: int = 4
    """CPU KV cache size (VLLM_CPU_KVCACHE_SPACE) when not set in the environment."""
    max_tokens: int = 48
    temperature: float = 0.0
    seed: int = 0


class CompressorConfig(BaseModel):
    """The compressor LM (separate from the generator, so a small scorer can sit in front of a big one)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str | None = None
    """Hugging Face folder or hub id; None = the bundled SmolLM2-135M-Instruct."""
    device: str = "cpu"
    """torch device of the compressor LM (cuda on a GPU machine)."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Weights of the llmlingua compressor LM. auto: the model's own dtype on a GPU; on a CPU bfloat16 where
    the CPU computes it natively (AVX512-BF16 or AMX; 2-3x faster than float32 for a 135M model, which is
    memory-bound at llmlingua's 16-64-token windows), else float32 (llmlingua's own CPU default)."""
    agnostic_window: int = 16
    """llmlingua `iterative_size` for per-passage compression: llmlingua 0.2.2 leaves the tail after the
    last full window uncompressed, so short passages need a small window to reach the requested ratio."""
    aware_window: int = 64
    """llmlingua `iterative_size` for LongLLMLingua over a whole context."""
    aware_condition_compare: bool = False
    """LongLLMLingua's contrastive perplexity (a second pass without the question): ~1.5x the cost."""


class SweepConfig(BaseModel):
    """Everything a sweep needs; its hash identifies a run's configuration."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index_path: Path
    questions_path: Path
    store_path: Path
    embedder: str = "minilm-l6-v2"
    index_version: int | None = None
    """LanceDB table version to read (None = the latest when the sweep starts; recorded either way)."""
    retrieve_n: int = Field(default=20, ge=1)
    """Candidates retrieved per question before reranking."""
    grid: GridConfig = Field(default_factory=GridConfig)
    generator: GeneratorConfig = Field(default_factory=GeneratorConfig)
    compressor: CompressorConfig = Field(default_factory=CompressorConfig)
    limit: int | None = None
    """Use only the first N questions (None = all)."""
    judge: JudgeConfig | None = None
    """An OpenAI-compatible judge model for ragas Faithfulness, in addition to the offline checker."""
    probe_questions: int = Field(default=8, ge=0)
    """Questions (lowest sha256 of id) also run alone per setting for the latency truth."""

    def config_hash(self) -> str:
        """Hash of everything except where files live."""
        return stable_hash(
            SweepConfig.model_validate(
                self.model_dump()
                | {"index_path": Path("."), "questions_path": Path(self.questions_path.name), "store_path": Path(".")}
            )
        )
