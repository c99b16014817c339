"""Parsing of the command line's compound flags into config values (kept apart from the commands)."""

from __future__ import annotations

from typing import Any

import typer

from flows.terminal import fail


def suffix_pair(spec: str) -> tuple[str, str]:
    """`--extension .txt=rst` -> (".txt", "rst")."""
    suffix, sep, name = spec.partition("=")
    if not sep or not suffix.startswith(".") or not name:
        raise typer.BadParameter(f"'{spec}': expected SUFFIX=EXTRACTOR, e.g. .txt=rst")
    return suffix.lower(), name


def parse_compression(spec: str) -> dict[str, Any]:
    """`--compression llmlingua:4` -> a CompressionSpec's fields; `pruned:auto:8` is `pruned-auto` with 8x as
    its ceiling.
    """
    name, _, ratio = spec.partition(":")
    if ratio.startswith("auto"):
        name, ratio = f"{name}-auto", ratio.removeprefix("auto").lstrip(":") or "8"
    elif name.endswith("-auto") and not ratio:  # `pruned-auto`: its ratio is a ceiling, 8x unless given
        ratio = "8"
    try:
        return {"compressor": name, "target_ratio": float(ratio) if ratio else 1.0}
    except ValueError:
        raise typer.BadParameter(f"'{spec}': expected NAME or NAME:RATIO, e.g. llmlingua:4") from None


def parse_answer_cache(spec: str) -> float | None:
    """`--answer-cache off` -> None; `--answer-cache 0.95` -> 0.95 (the range is checked by the config)."""
    if spec.lower() == "off":
        return None
    try:
        return float(spec)
    except ValueError:
        fail(f"--answer-cache '{spec}': expected off or a cosine threshold in [0, 1], e.g. 0.95")


def judge_overrides(ref: str | None, url: str | None, model: str | None) -> dict[str, Any]:
    """`--judge vllm:MODEL` (served here) or `--judge-url/--judge-model` (an endpoint), not both."""
    from flows.config import given

    if ref is None:
        return given(base_url=url, model=model)
    if url or model:
        fail("--judge serves a model itself; drop --judge-url/--judge-model, or drop --judge")
    name, _, served = ref.partition(":")
    return given(name=name, model=served or None)


def verifier_overrides(ref: str | None) -> dict[str, Any]:
    """`--verifier nli:MODEL`, `likelihood` or `likelihood:CARD` -> the verifier's name and model."""
    if ref is None:
        return {}
    name, sep, model = ref.partition(":")
    if name == "likelihood" and not sep:
        return {"name": name}
    if not sep or not model:
        fail(f"--verifier '{ref}': expected NAME:MODEL, e.g. nli:/models/deberta-v3-mnli, or likelihood")
    return {"name": name, "model": model}


ENGINE_KNOBS = ("enable_chunked_prefill", "max_num_batched_tokens", "kv_cache_dtype", "max_model_len")
"""The engine's prefill knobs a sweep can set (`--engine KEY=VALUE`); values are checked by the config."""


def engine_knobs(specs: list[str]) -> dict[str, Any]:
    """`--engine max_num_batched_tokens=512` -> generator config fields."""
    knobs: dict[str, Any] = {}
    for spec in specs:
        key, sep, value = spec.partition("=")
        if not sep or key not in ENGINE_KNOBS:
            fail(f"--engine '{spec}': expected KEY=VALUE with KEY one of {', '.join(ENGINE_KNOBS)}")
        knobs[key] = value
    return knobs
