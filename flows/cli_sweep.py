"""Commands that run a sweep or prepare one: `sweep` (the grid over a question set, stored), `warm` (the
prefix cache a sweep relies on, checked alone) and `tune-pruning` (pruned-auto's knobs for a sweep's config).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from corpus.errors import CribsheetError
from flows.app import (
    ConfigOption,
    GpusOption,
    RayAddressOption,
    WorkersOption,
    app,
    error_message,
    prepare_environment,
    ray_options,
    reachable_prefect,
)
from flows.options import engine_knobs, judge_overrides, parse_answer_cache, parse_compression, verifier_overrides
from flows.terminal import (
    engine_log,
    err,
    fail,
    log_path,
    noise_floor_line,
    out,
    print_leaderboard,
    progress,
    seconds,
    show_path,
)

if TYPE_CHECKING:
    from eval.compress.tuning import PruningTuning
    from eval.run.sweep import SweepResult


@app.command()
def sweep(
    config_file: ConfigOption = None,
    index_path: Annotated[
        Path | None, typer.Option("--index", help="LanceDB folder built by `cribsheet index`.")
    ] = None,
    questions: Annotated[Path | None, typer.Option(help="JSONL questions: {id, question, answers, ...}.")] = None,
    store: Annotated[Path | None, typer.Option(help="DuckDB results file (created or appended).")] = None,
    top_k: Annotated[list[int], typer.Option("--top-k", help="Chunks kept after reranking; repeat [3, 8].")] = [],  # noqa: B006
    compression: Annotated[
        list[str], typer.Option("--compression", help="NAME[:RATIO]; repeat [none, llmlingua:4, longllmlingua:4].")
    ] = [],  # noqa: B006
    retrieval: Annotated[list[str], typer.Option(help="hybrid | vector | fts; repeat [hybrid].")] = [],  # noqa: B006
    reranker: Annotated[
        list[str],
        typer.Option(
            help="dense | query-likelihood | none | cross-encoder:PATH | bi-encoder:PATH; repeat [dense].",
        ),
    ] = [],  # noqa: B006
    layout: Annotated[list[str], typer.Option(help="ranked | edges; repeat [ranked].")] = [],  # noqa: B006
    output: Annotated[list[str], typer.Option(help="text | cited-json (answer + passage citations); repeat.")] = [],  # noqa: B006
    answer_cache: Annotated[
        list[str], typer.Option(help="off | cosine threshold in [0, 1]: semantic answer cache; repeat [off].")
    ] = [],  # noqa: B006
    retrieve_n: Annotated[int | None, typer.Option(help="Candidates retrieved per question [20].")] = None,
    probe_questions: Annotated[
        int | None, typer.Option(help="Questions also run alone per setting (latency truth) [30].")
    ] = None,
    limit: Annotated[int | None, typer.Option(help="Only the first N questions.")] = None,
    generator_model: Annotated[str | None, typer.Option(help="HF folder or hub id (default: bundled SmolLM2).")] = None,
    engine: Annotated[
        list[str],
        typer.Option(
            help="Engine knob KEY=VALUE: enable_chunked_prefill, max_num_batched_tokens, kv_cache_dtype, max_model_len."
        ),
    ] = [],  # noqa: B006
    compressor_model: Annotated[str | None, typer.Option(help="Compressor LM (default: bundled SmolLM2).")] = None,
    judge_url: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint of a judge model (ragas).")] = None,
    judge_model: Annotated[str | None, typer.Option(help="Judge model name at --judge-url.")] = None,
    judge: Annotated[
        str | None, typer.Option(help="vllm[:MODEL]: serve a judge model here (vLLM server subprocess).")
    ] = None,
    verifier: Annotated[
        str | None,
        typer.Option(
            help="A model verifier beside the rule checker: likelihood (the generator's own likelihoods, packaged "
            "card), likelihood:CARD, or nli:MODEL (local folder or HF-cache id)."
        ),
    ] = None,
    resume: Annotated[
        bool, typer.Option(help="Resume an unfinished run of the same inputs (keeps its finished settings).")
    ] = True,
    reuse: Annotated[
        bool, typer.Option(help="Copy settings an earlier run computed over the same inputs instead of recomputing.")
    ] = True,
    workers: WorkersOption = None,
    ray_address: RayAddressOption = None,
    gpus_per_worker: GpusOption = None,
) -> None:
    """Run the grid of settings over a question set and store one row per question × setting."""
    prepare_environment()
    from eval.run.preflight import check_sweep
    from eval.settings import SweepConfig
    from flows.config import given, load_config
    from flows.pipeline import sweep_flow

    grid = given(
        compressions=[parse_compression(c) for c in compression],
        top_ks=top_k,
        retrievals=retrieval,
        rerankers=reranker,
        layouts=layout,
        outputs=output,
        answer_caches=[parse_answer_cache(a) for a in answer_cache],
    )
    overrides: dict[str, Any] = given(
        index_path=index_path,
        questions_path=questions,
        store_path=store,
        retrieve_n=retrieve_n,
        limit=limit,
        probe_questions=probe_questions,
    )
    for key, value in (
        ("grid", grid),
        ("generator", given(model=generator_model) | engine_knobs(engine)),
        ("compressor", given(model=compressor_model)),
        ("judge", judge_overrides(judge, judge_url, judge_model)),
        ("verifier", verifier_overrides(verifier)),
    ):
        if value:
            overrides[key] = value
    log = None
    try:
        config = load_config(SweepConfig, config_file, overrides)  # names are checked here, before any model loads
        check_sweep(config)  # and the questions and the index, before a flow starts
        log = log_path(config.store_path.parent, "sweep")
        with engine_log(log), progress(), reachable_prefect():
            result = sweep_flow(
                config, resume=resume, reuse=reuse, ray=ray_options(workers, ray_address, gpus_per_worker)
            )
    except (CribsheetError, ValueError) as exc:
        fail(error_message(exc), log=log if log and log.exists() and log.stat().st_size else None)
    _print_sweep(result, log, config.store_path)


def _print_sweep(result: SweepResult, log: Path | None, store_path: Path) -> None:
    """What `sweep` did: settings kept and reused (stderr), the leaderboard and the A/A line (stdout)."""
    if result.resumed or result.settings_reused:
        err.print(
            f"run {result.run_id}{' (resumed)' if result.resumed else ''}: {result.settings_kept} settings kept, "
            f"{result.settings_reused} reused from earlier runs, {result.settings_computed} computed",
            highlight=False,
        )
    print_leaderboard(result.leaderboard, f"run {result.run_id}", result.faithfulness)
    out.print(noise_floor_line(result.noise_floor, result.load), highlight=False, soft_wrap=True)
    err.print(f"engine log: {log}", highlight=False)
    show_path(store_path)


@app.command()
def warm(
    generator_model: Annotated[str | None, typer.Option(help="HF folder or hub id (default: bundled SmolLM2).")] = None,
) -> None:
    """Load the generator, run the stable prompt prefix cold then warm, and report the cache hit."""
    prepare_environment()
    from eval.engine.bundled_models import default_cache_dir
    from eval.engine.generator import GeneratorConfig
    from eval.prompt import PromptLayout
    from eval.run.wiring import build_generator

    log = log_path(default_cache_dir(), "warm")
    try:
        config = GeneratorConfig(model=generator_model)
        with engine_log(log):
            gen = build_generator(config)
            try:
                rep = gen.warm(PromptLayout(getattr(gen, "tokenizer", None)).stable_prefix())
            finally:
                gen.close()  # the engine's processes go, whatever warm() did
    except CribsheetError as exc:
        fail(str(exc), log=log)
    out.print(
        f"stable prefix {rep.prefix_tokens} tokens, {rep.cached_tokens} served from cache "
        f"(block size {config.block_size}); TTFT cold {seconds(rep.cold_ttft_s)}, warm {seconds(rep.warm_ttft_s)}"
    )


@app.command("tune-pruning")
def tune_pruning(
    questions: Annotated[
        Path,
        typer.Option(help="JSONL tune questions with reference answers: never the set a sweep will judge you on."),
    ],
    config_file: Annotated[
        Path | None,
        typer.Option("--config", help="A sweep's YAML file: its index, embedder, retrieval, generator, compressor."),
    ] = None,
    index_path: Annotated[
        Path | None, typer.Option("--index", help="LanceDB folder built with --sentence-vectors.")
    ] = None,
    top_k: Annotated[int, typer.Option("--top-k", help="Chunks kept after reranking.")] = 8,
    max_loss: Annotated[
        float,
        typer.Option(min=0.0, max=1.0, help="Context token recall the setting may lose, as a share (its 95 % bound)."),
    ] = 0.05,
    ratio: Annotated[float, typer.Option(min=1.0, help="The ratio ceiling of pruned-auto:RATIO.")] = 8.0,
    limit: Annotated[int | None, typer.Option(help="Only the first N tune questions.")] = None,
    generator_model: Annotated[
        str | None, typer.Option(help="Whose tokenizer counts tokens (default: bundled SmolLM2).")
    ] = None,
    not_on: Annotated[
        list[Path],
        typer.Option("--not-on", help="A question file a sweep or gate judges (repeat); --config's is always one."),
    ] = [],  # noqa: B006  (typer reads the default; it is never mutated)
) -> None:
    """Choose pruned-auto's relevance share and passages kept whole on your own tune questions: the one with
    the fewest prompt tokens whose context token recall loss is within --max-loss with 95 % confidence. Exit 1
    when no setting is, 2 on bad input. Reads the index, embedder, retrieval depth, first retrieval mode and reranker,
    generator and other compressor knobs from a sweep --config; prints the `compressor:` lines to put in it.
    """
    prepare_environment()
    from eval.compress.pruned_auto import AutoPrunedConfig
    from eval.run.tune_pruning import TuneInputs
    from eval.run.tune_pruning import tune_pruning as run_tuning
    from eval.settings import SweepConfig
    from flows.config import load_config

    try:
        base = AutoPrunedConfig()
        if config_file:
            sweep = load_config(SweepConfig, config_file, {"index_path": index_path} if index_path else {})
            inputs = TuneInputs(
                sweep.index_path,
                questions,
                embedder=sweep.embedder,
                generator_model=generator_model or sweep.generator.model,
                top_k=top_k,
                retrieve_n=sweep.retrieve_n,
                retrieval=sweep.grid.retrievals[0],
                reranker=sweep.grid.rerankers[0],
                limit=limit,
                index_version=sweep.index_version,
                not_on=(sweep.questions_path, *not_on),
            )
            known = set(AutoPrunedConfig.model_fields)
            base = AutoPrunedConfig(**{k: v for k, v in sweep.compressor.model_dump().items() if k in known})
        elif index_path is None:
            raise CribsheetError("give --index or a sweep --config")
        else:
            inputs = TuneInputs(
                index_path, questions, top_k=top_k, limit=limit, generator_model=generator_model, not_on=tuple(not_on)
            )
        with progress() as tick:
            result = run_tuning(inputs, base, max_loss, ratio, tick)
    except (CribsheetError, ValueError) as exc:
        fail(error_message(exc))
    _print_tuning(result, top_k, max_loss)


def _print_tuning(result: PruningTuning, top_k: int, max_loss: float) -> None:
    """Every tuned point with its loss bound and ratios, then the chosen one as `compressor:` lines; exit 1
    when none is within `max_loss`.
    """
    prompts = f", {result.prompt_tokens:.0f} prompt tokens" if result.prompt_tokens else ""
    out.print(
        f"{result.questions} tune questions, top-{top_k}, uncompressed: context token recall "
        f"{result.baseline_recall:.3f}{prompts}.\nLoss in points (95 % upper bound), realized context ratio, "
        "prompt tokens the prefill pays (uncompressed / these: the end-to-end speed-up's ceiling):",
        highlight=False,
    )
    for point in result.points:
        mark = "  <- chosen" if point is result.chosen else ""
        prompt = (
            f"  {point.prompt_tokens:6.0f} ({point.prompt_ratio:4.2f}x)"
            if point.prompt_tokens and point.prompt_ratio
            else ""
        )
        out.print(
            f"  pruned-auto {point.name:<10} {100 * point.loss:5.1f} ({100 * point.loss_bound:5.1f})  "
            f"{point.ratio:5.2f}x{prompt}{mark}",
            highlight=False,
        )
    if result.chosen is None:
        best = min(result.points, key=lambda p: p.loss_bound)
        fail(
            f"no setting is within {100 * max_loss:.1f} points with 95 % confidence (the closest, {best.name}, "
            f"has an upper bound of {100 * best.loss_bound:.1f}): keep the defaults, or allow a larger --max-loss",
            code=1,
        )
    out.print(
        f"compressor:\n  relevance_share: {result.chosen.relevance_share}\n"
        f"  whole_passages: {result.chosen.whole_passages}",
        highlight=False,
    )
