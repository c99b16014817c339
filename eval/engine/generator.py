"""Generators behind one Protocol; the real one is a vLLM engine with prefix caching."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from corpus.errors import CribsheetError
from corpus.registry import Registry
from eval.engine.precision import cpu_engine_env, vllm_dtype


class VLLMConfig(BaseModel):
    """The vLLM engine and sampling; any field can point at a GPU model without code changes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str | None = None
    """Hugging Face folder or hub id; None = the bundled SmolLM2-135M-Instruct (converted once)."""
    dtype: str = "auto"
    """Engine precision; auto: bfloat16 on a CPU only where it is native, else float32 (`eval/engine/precision.py`)."""
    max_model_len: int = Field(default=4096, ge=64)
    """Engine knob: longest prompt + answer in tokens (the KV cache is sized for it)."""
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
    enable_chunked_prefill: bool | None = None
    """Engine knob: split long prefills into chunks scheduled with decodes (None = the engine's default)."""
    max_num_batched_tokens: int | None = Field(default=None, ge=16)
    """Engine knob: tokens per scheduler step (the prefill chunk size with chunked prefill; None = default)."""
    kv_cache_dtype: Literal["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"] = "auto"
    """Engine knob: KV-cache precision (fp8 halves its memory; on CPU only some kernels support it)."""
    probe_tokens: int = Field(default=8, ge=1)
    """Tokens a latency probe generates: TTFT needs the first, the rest time a decode (`probe_decode_s`)."""

    @model_validator(mode="after")
    def _knobs_fit(self) -> VLLMConfig:
        budget = self.max_num_batched_tokens
        if self.enable_chunked_prefill is False and budget is not None and budget < self.max_model_len:
            raise ValueError(
                f"max_num_batched_tokens ({budget}) must be at least max_model_len ({self.max_model_len}) "
                "when chunked prefill is off (a whole prompt is prefilled in one step)"
            )
        if self.max_tokens >= self.max_model_len:
            raise ValueError(f"max_tokens ({self.max_tokens}) leaves no room for a prompt in max_model_len")
        return self


class GeneratorConfig(VLLMConfig):
    """The generator: a registered backend name and the vLLM engine's options."""

    name: str = "vllm"
    """Registered generator name (tests register fakes)."""


class Generation(BaseModel):
    """One completed request."""

    text: str
    prompt_tokens: int
    cached_tokens: int  # prompt tokens served from the prefix cache
    ttft_s: float | None  # time to first token as vLLM measured it (None when the engine reports none)
    cut: bool = False  # the engine stopped at max_tokens, mid-answer (finish reason "length")


class Probe(BaseModel):
    """One request run alone (no queueing): the latency truth for a prompt."""

    prompt_tokens: int
    cached_tokens: int
    ttft_s: float | None  # arrival to first token, as vLLM measured it
    prefill_s: float | None  # scheduled to first token: the engine's own prefill time
    decode_s: float | None  # first to last token
    output_tokens: int


class WarmReport(BaseModel):
    """Cold vs warm run of the stable prefix."""

    prefix_tokens: int
    cached_tokens: int
    cold_ttft_s: float | None
    warm_ttft_s: float | None


Schemas = dict[str, Any] | list[dict[str, Any]] | None  # one JSON schema for a batch, or one per prompt


class Generator(Protocol):
    """Batch text generation with per-request token and latency accounting."""

    name: str

    def generate(self, prompts: Sequence[str], json_schema: Schemas = None) -> list[Generation]:
        """One batch: an answer with token counts and TTFT per prompt, in order; with `json_schema` (one for
        every prompt, or a list with one per prompt), answers are held to it (the engine's structured output).
        """
        ...

    def warm(self, prefix: str) -> WarmReport:
        """Run the stable prefix cold, then warm, and report what the cache served."""
        ...

    def count_tokens(self, text: str) -> int:
        """Tokens of `text` under the generator's tokenizer."""
        ...

    def probe(self, prompt: str, json_schema: dict[str, Any] | None = None) -> Probe:
        """Run one prompt alone and report its latency parts (held to `json_schema` when given)."""
        ...

    def reset_cache(self) -> None:
        """Forget every cached prefix."""
        ...

    def close(self) -> None:
        """Release the engine (no-op for in-process backends)."""
        ...


@runtime_checkable
class TokenScorer(Protocol):
    """Scores token sequences with a language model: log p(token | tokens before it)."""

    tokenizer: Any

    def token_logprobs(self, token_ids: Sequence[Sequence[int]]) -> list[list[float | None]]:
        """Log p(token | tokens before it) for every token of each sequence (the first is None)."""
        ...


BatchProgress = Callable[[int, int], None]
"""(requests finished, requests in the batch), called as each request of one engine batch finishes."""


@runtime_checkable
class ReportsBatchProgress(Protocol):
    """A generator that reports each finished request of a running batch to `batch_progress` (None: silent):
    one batch of a setting can run for minutes, and the caller's progress would otherwise say 0 done until
    it returns.
    """

    batch_progress: BatchProgress | None


class EngineProgress:
    """A tqdm stand-in for vLLM's `use_tqdm` callable, which vLLM calls twice per `generate`: around the prompts
    it renders (an iterable, passed through and not counted) and for the requests it runs (`total=`), whose
    `update(n)` as requests finish forwards (finished, total) to `report`. It prints nothing: vLLM's own bar
    goes to the engine log, where a person watching the command never sees it.
    """

    def __init__(
        self, report: BatchProgress, iterable: Iterable[Any] | None = None, total: int | None = None, **_: Any
    ) -> None:
        self.report = report
        self.iterable = iterable
        self.total = int(total or 0)
        self.n = 0
        self.postfix: Any = None  # vLLM writes its token rates here
        self._start = time.perf_counter()
        if iterable is None:
            report(0, self.total)  # the batch is queued: its size is known before the first request finishes

    def __iter__(self) -> Iterator[Any]:
        return iter(self.iterable if self.iterable is not None else ())

    @property
    def format_dict(self) -> dict[str, Any]:
        """What vLLM reads of a tqdm bar: the elapsed seconds it divides token counts by (never zero)."""
        return {"elapsed": max(time.perf_counter() - self._start, 1e-6), "n": self.n, "total": self.total}

    def update(self, n: int = 1) -> None:
        """`n` more requests finished."""
        self.n += n
        self.report(self.n, self.total)

    def refresh(self) -> None:
        """Nothing to redraw."""

    def close(self) -> None:
        """Nothing to release."""


def engine_progress(report: BatchProgress) -> Callable[..., EngineProgress]:
    """The `use_tqdm` argument of vLLM's `generate` that reports each finished request of the batch to `report`."""

    def make(iterable: Iterable[Any] | None = None, **kwargs: Any) -> EngineProgress:
        return EngineProgress(report, iterable, **kwargs)

    return make


@dataclass
class GeneratorDeps:
    """What a generator factory may use."""

    default_model: str | None = None
    """Model used when the config names none (the bundled SmolLM2 folder)."""


GENERATORS: Registry[Generator, GeneratorDeps] = Registry("generator")
"""Registered generators; `GeneratorConfig.name` names one."""


SCHEMA_MAX_TOKENS = 160  # tokens a schema-held answer may use: the bounded cited-JSON object fits


class VLLMGenerator:
    """`vllm.LLM` with prefix caching on; runs on CPU (vllm-cpu) or GPU by configuration alone."""

    name = "vllm"

    def __init__(self, model: str, config: VLLMConfig) -> None:
        self.batch_progress: BatchProgress | None = None
        cpu_engine_env(os.environ, config.kv_cache_gib)
        from vllm import LLM, SamplingParams  # heavy: keep inside the adapter

        kwargs: dict[str, Any] = dict(
            model=model,
            dtype=vllm_dtype(config.dtype),
            max_model_len=config.max_model_len,
            enable_prefix_caching=True,
            disable_log_stats=False,
            enforce_eager=config.enforce_eager,
            seed=config.seed,
            gpu_memory_utilization=config.gpu_memory_utilization,
            structured_outputs_config={"backend": "xgrammar", "disable_any_whitespace": True},  # bounded JSON
        )
        knobs: dict[str, Any] = dict(block_size=config.block_size, enable_chunked_prefill=config.enable_chunked_prefill)
        knobs |= dict(max_num_batched_tokens=config.max_num_batched_tokens, kv_cache_dtype=config.kv_cache_dtype)
        kwargs |= {k: v for k, v in knobs.items() if v not in (None, "auto")}  # unset: the engine's default
        self.llm = LLM(**kwargs)
        self.config_dtype, self.tokenizer = config.dtype, self.llm.get_tokenizer()
        self.max_prompt_tokens = config.max_model_len - config.max_tokens  # longer prompts fail alone
        self.max_model_len = config.max_model_len  # a sequence scored by token_logprobs must be shorter
        self.max_schema_prompt_tokens = config.max_model_len - max(config.max_tokens, SCHEMA_MAX_TOKENS)
        self.sampling = SamplingParams(max_tokens=config.max_tokens, temperature=config.temperature, seed=config.seed)
        self._probe = SamplingParams(max_tokens=1, temperature=0.0)
        self._latency = SamplingParams(
            max_tokens=min(config.probe_tokens, config.max_tokens), temperature=config.temperature, seed=config.seed
        )

    @property
    def precision(self) -> str:
        """The dtype the engine resolved and runs at ("auto" and the CPU's fallbacks made concrete)."""
        dtype = getattr(getattr(self.llm.llm_engine, "model_config", None), "dtype", None)
        return str(dtype).removeprefix("torch.") if dtype is not None else str(self.config_dtype)

    def count_tokens(self, text: str) -> int:
        """Tokens of `text` without special tokens."""
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    @staticmethod
    def _ttft(out: Any) -> float | None:
        value = getattr(getattr(out, "metrics", None), "first_token_latency", None)  # None without metrics
        return float(value) if value is not None and value > 0 else None

    def generate(self, prompts: Sequence[str], json_schema: Schemas = None) -> list[Generation]:
        """One engine batch with the sweep's sampling parameters (held to `json_schema` when given)."""
        schemas = json_schema if isinstance(json_schema, list) else [json_schema] * len(prompts)
        params = [self._params(self.sampling, s, SCHEMA_MAX_TOKENS) for s in schemas]
        # Without a reporter, vLLM's own bar (into the engine log); with one, each finished request reported.
        progress = True if self.batch_progress is None else engine_progress(self.batch_progress)
        outs = self.llm.generate(list(prompts), params, use_tqdm=progress)
        return [
            Generation(
                text=o.outputs[0].text.strip(),
                prompt_tokens=len(o.prompt_token_ids or []),
                cached_tokens=int(o.num_cached_tokens or 0),
                ttft_s=self._ttft(o),
                cut=o.outputs[0].finish_reason == "length",  # stopped at max_tokens, mid-answer
            )
            for o in outs
        ]

    @staticmethod
    def _params(base: Any, json_schema: dict[str, Any] | None, min_tokens: int = 0) -> Any:
        """`base`, or a copy held to `json_schema` with room (`min_tokens`) to close the whole object."""
        if json_schema is None:
            return base
        from vllm.sampling_params import StructuredOutputsParams

        params = base.clone()
        params.structured_outputs = StructuredOutputsParams(json=json_schema)
        params.max_tokens = max(params.max_tokens or 0, min_tokens)
        return params

    def reset_cache(self) -> None:
        """Drop every cached prefix block."""
        if self.llm.reset_prefix_cache() is False:
            # vLLM refuses while requests are in flight; a sweep that went on would measure a warm cache.
            raise RuntimeError("vLLM did not reset its prefix cache (requests still running?)")

    def close(self) -> None:
        """Stop the engine process now, rather than from an exit hook that reports it as a crash."""
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()

    def probe(self, prompt: str, json_schema: dict[str, Any] | None = None) -> Probe:
        """Run one prompt alone and read vLLM's own timestamps."""
        out = self.llm.generate([prompt], self._params(self._latency, json_schema), use_tqdm=False)[0]
        stats = getattr(out, "metrics", None)

        def span(a: str, b: str) -> float | None:
            x, y = getattr(stats, a, 0.0) or 0.0, getattr(stats, b, 0.0) or 0.0
            return float(y - x) if x and y and y >= x else None

        return Probe(
            prompt_tokens=len(out.prompt_token_ids or []),
            cached_tokens=int(out.num_cached_tokens or 0),
            ttft_s=self._ttft(out),
            prefill_s=span("scheduled_ts", "first_token_ts"),
            decode_s=span("first_token_ts", "last_token_ts"),
            output_tokens=len(out.outputs[0].token_ids),
        )

    def token_logprobs(self, token_ids: Sequence[Sequence[int]]) -> list[list[float | None]]:
        """Log p(token | tokens before it) for every prompt token (the first is None), in one batch.

        vLLM does not read the prefix cache for such requests, so this costs about 1.5x a plain prefill.
        """
        from vllm import SamplingParams

        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        prompts: Any = [{"prompt_token_ids": list(ids)} for ids in token_ids]
        outs = self.llm.generate(prompts, params, use_tqdm=False)
        rows: list[list[float | None]] = []
        for ids, out in zip(token_ids, outs, strict=True):
            row: list[float | None] = [None]
            for tok, scores in zip(list(ids)[1:], (out.prompt_logprobs or [])[1:], strict=False):
                row.append(float(scores[tok].logprob) if scores and tok in scores else None)
            rows.append(row)
        return rows

    def warm(self, prefix: str) -> WarmReport:
        """Run the stable prefix twice (cold, then warm) and report what the cache served."""
        cold = self.llm.generate([prefix], self._probe, use_tqdm=False)[0]
        warm = self.llm.generate([prefix], self._probe, use_tqdm=False)[0]
        return WarmReport(
            prefix_tokens=len(cold.prompt_token_ids or []),
            cached_tokens=int(warm.num_cached_tokens or 0),
            cold_ttft_s=self._ttft(cold),
            warm_ttft_s=self._ttft(warm),  # None when the engine reports no TTFT: never a wall-clock stand-in
        )


@GENERATORS.register("vllm", VLLMConfig)
def _vllm(config: VLLMConfig, deps: GeneratorDeps) -> Generator:
    """VLLM with prefix caching (CPU or GPU build, by configuration alone)."""
    model = config.model or deps.default_model
    if not model:
        raise CribsheetError("generator 'vllm' needs a model (folder or hub id)")
    return VLLMGenerator(model, config)
