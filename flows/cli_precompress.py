"""`cribsheet precompress`: compress every chunk of an index snapshot with a query-agnostic compressor, once,
offline, and record the bill beside the index (`eval.run.precompute`). A sweep over that very snapshot then
times requests that read these compressions and shows the bill beside their figure; without it, the latency
phase times the compressor's model in every request, as a first request pays it.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer

from corpus.errors import CribsheetError
from flows.app import ConfigOption, app, error_message, prepare_environment
from flows.options import parse_compression
from flows.terminal import engine_log, err, fail, log_path, out, progress, show_path


@app.command()
def precompress(
    config_file: ConfigOption = None,
    index_path: Annotated[
        Path | None, typer.Option("--index", help="LanceDB folder built by `cribsheet index`.")
    ] = None,
    compression: Annotated[
        list[str], typer.Option("--compression", help="NAME:RATIO of a query-agnostic compressor; repeat.")
    ] = [],  # noqa: B006
    compressor_model: Annotated[str | None, typer.Option(help="Compressor LM (default: bundled SmolLM2).")] = None,
    generator_model: Annotated[
        str | None, typer.Option(help="The sweep's generator (its tokenizer counts tokens; default: bundled).")
    ] = None,
    batch: Annotated[int, typer.Option(min=1, help="Chunks per compressor call.")] = 16,
) -> None:
    """Compress every chunk of the index's latest snapshot with each query-agnostic compressor, offline, and
    record what it cost beside the index; sweeps of that snapshot then read these compressions.
    """
    prepare_environment()
    from eval.settings import Setting, SweepConfig
    from flows.config import given, load_config

    if not compression:
        fail("name at least one --compression NAME:RATIO (e.g. llmlingua:4)")
    specs = [parse_compression(c) for c in compression]
    overrides: dict[str, Any] = given(index_path=index_path)
    overrides.setdefault("questions_path", Path("unused-by-precompress.jsonl"))
    overrides.setdefault("store_path", Path("unused-by-precompress.duckdb"))
    for key, value in (("generator", given(model=generator_model)), ("compressor", given(model=compressor_model))):
        if value:
            overrides[key] = value
    log = None
    try:
        config = load_config(SweepConfig, config_file, overrides)
        settings = [Setting(top_k=1, compressor=s["compressor"], target_ratio=s["target_ratio"]) for s in specs]
        log = log_path(config.index_path.parent, "precompress")
        with engine_log(log), progress() as tick:
            records = _precompress(config, settings, tick, batch)
    except (CribsheetError, ValueError) as exc:
        fail(error_message(exc), log=log if log and log.exists() and log.stat().st_size else None)
    for r in records:
        out.print(
            f"{r.compressor} {r.ratio:g}x: {r.chunks} chunks ({r.computed} computed now) of chunk version "
            f"{r.chunk_version} in {r.seconds:.1f} s; {r.seconds_per_chunk:.3f} s a chunk, "
            f"{r.corpus_cpu_hours:.3f} CPU-hours for the snapshot",
            highlight=False,
            soft_wrap=True,
        )
    err.print(f"engine log: {log}", highlight=False)
    show_path(config.index_path)


def _tick(tick: Any, stage: str, total: int, done: int) -> None:
    tick(stage, done, max(total, done))


def _precompress(config: Any, settings: list[Any], tick: Any, batch: int) -> list[Any]:
    """Build the sweep's own compressors (the same identity a sweep computes) and run the step for each."""
    from eval.run.precompute import precompress
    from eval.run.wiring import build_components, index_identity

    ident = index_identity(config)
    comps = build_components(config, settings)
    try:
        out_records = []
        for s in settings:
            stage = f"precompress {s.compressor} {s.target_ratio:g}x"
            total = comps.retriever.table.count_rows() if hasattr(comps.retriever, "table") else 0
            out_records.append(
                precompress(
                    config.index_path,
                    ident,
                    s.compressor,
                    comps.compressors[s.compressor],
                    s.target_ratio,
                    batch,
                    tick=partial(_tick, tick, stage, total),
                )
            )
        return out_records
    finally:
        comps.close()
