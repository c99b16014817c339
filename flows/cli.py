"""The `cribsheet` command line: a shell over the flows; every writing command prints where it wrote."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from corpus.errors import CribsheetError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Measure crib-sheet levers (rerank, compress, prefix cache) and store the evidence.",
)
err = Console(stderr=True)
out = Console(width=None if sys.stdout.isatty() else 200)  # piped output: do not squeeze the leaderboard

LEADERBOARD_COLUMNS = [
    ("setting_name", "setting", "{}"),
    ("n", "n", "{}"),
    ("n_failed", "failed", "{}"),
    ("answer_contains", "ans∈", "{:.3f}"),
    ("answer_token_recall", "tok rec", "{:.3f}"),
    ("context_answer_recall", "ctx rec", "{:.3f}"),
    ("ttft_p50_s", "TTFT p50 s", "{:.3f}"),
    ("ttft_p95_s", "TTFT p95 s", "{:.3f}"),
    ("mean_prompt_tokens", "prompt tok", "{:.0f}"),
    ("mean_cached_tokens", "cached tok", "{:.0f}"),
    ("realized_ratio", "ratio", "{:.2f}"),
    ("mean_compress_s", "compress s", "{:.3f}"),
]


def _seconds(value: float | None) -> str:
    """A duration for people: milliseconds precision, or n/a when the engine reported none."""
    return "n/a" if value is None else f"{value:.3f} s"


def _environment() -> None:
    """Defaults for a quiet, offline, self-contained run; anything the user set wins."""
    from eval.assets import default_cache_dir
    from eval.runtime import quiet_offline_env

    os.environ.setdefault("PREFECT_HOME", str(default_cache_dir() / "prefect"))
    # Prefect creates only the last folder of its home; on a fresh machine the cache folder is missing too.
    Path(os.environ["PREFECT_HOME"]).expanduser().mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # A fresh PREFECT_HOME migrates its database on the first start: on 2 busy cores that can pass 20 s.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    # The CLI prints user errors itself on one line; Prefect would log each with a traceback first.
    # Scheduled deployments run through a worker and keep Prefect's normal logging.
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "CRITICAL")
    quiet_offline_env()


@contextmanager
def _progress() -> Iterator[Callable[[str, int, int], None]]:
    from flows.progress import set_reporter

    bars: dict[str, Any] = {}
    with Progress(
        TextColumn("{task.description:<40}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    ) as progress:

        def tick(stage: str, done: int, total: int) -> None:
            if stage not in bars:
                bars[stage] = progress.add_task(stage, total=total)
            progress.update(bars[stage], completed=done, total=total)

        set_reporter(tick)
        try:
            yield tick
        finally:
            set_reporter(None)


def _fail(exc: BaseException) -> None:
    from pydantic import ValidationError

    message = str(exc)
    if isinstance(exc, ValidationError):  # one line: "grid.retrievals.0: Input should be ..."
        message = "invalid option: " + "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
    err.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def print_leaderboard(rows: list[dict[str, Any]], title: str) -> None:
    """The leaderboard as a terminal table."""
    table = Table(title=title)
    for _, header, _ in LEADERBOARD_COLUMNS:
        table.add_column(header, justify="left" if header == "setting" else "right")
    for row in rows:
        table.add_row(*["NULL" if row[key] is None else fmt.format(row[key]) for key, _, fmt in LEADERBOARD_COLUMNS])
    out.print(table)


@app.command()
def dataset(out_dir: Annotated[Path, typer.Option("--out", help="Folder for the files.")] = Path("datasets")) -> None:
    """Build the bundled corpus and question sets from the installed packages."""
    try:
        from corpus.bundled import build_bundled

        manifest = build_bundled(out_dir)
    except CribsheetError as exc:
        _fail(exc)
    for name, info in manifest["files"].items():
        out.print(f"{out_dir / name}: {info['records']} records, sha256 {info['sha256'][:12]}")
    print(out_dir / "MANIFEST.json")


@app.command()
def index(
    corpus: Annotated[Path, typer.Option(help="A folder (.md .rst .txt .html), a .jsonl or a .parquet file.")],
    index_path: Annotated[Path, typer.Option("--index", help="LanceDB folder to create or sync.")],
    embedder: Annotated[str, typer.Option(help="Registered embedder name.")] = "minilm-l6-v2",
    max_tokens: Annotated[int, typer.Option(help="Embedder tokens per chunk at most.")] = 200,
    overlap_tokens: Annotated[int, typer.Option(help="Tokens of trailing sentences repeated in the next chunk.")] = 0,
    id_field: Annotated[str, typer.Option(help="JSONL/Parquet column holding the document id.")] = "id",
    text_field: Annotated[str, typer.Option(help="JSONL/Parquet column holding the text.")] = "text",
    title_field: Annotated[str, typer.Option(help="JSONL/Parquet column holding the title (optional).")] = "title",
    metadata_field: Annotated[list[str], typer.Option(help="Extra column kept with each document; repeat.")] = [],  # noqa: B006
    max_file_bytes: Annotated[int, typer.Option(help="Folder mode: larger files are skipped.")] = 10_000_000,
    ann_threshold: Annotated[int, typer.Option(help="Build an ANN vector index from this many chunks.")] = 100_000,
    rebuild: Annotated[bool, typer.Option(help="Rebuild from scratch even when nothing changed.")] = False,
) -> None:
    """Chunk, embed and index a corpus into LanceDB; re-running embeds only new or changed documents."""
    _environment()
    from corpus.chunk import ChunkerConfig
    from corpus.index import REPORT_FILE, IndexOptions
    from corpus.sources import SourceConfig
    from flows.pipeline import index_flow

    try:
        source = SourceConfig(
            path=corpus,
            id_field=id_field,
            text_field=text_field,
            title_field=title_field,
            metadata_fields=metadata_field,
            max_file_bytes=max_file_bytes,
        )
        chunker = ChunkerConfig(max_tokens=max_tokens, overlap_tokens=overlap_tokens)
        options = IndexOptions(ann_threshold=ann_threshold, rebuild=rebuild)
        with _progress():
            rep = index_flow(corpus, index_path, embedder, chunker, options, source)
    except (CribsheetError, ValueError) as exc:
        _fail(exc)
    for item in rep.skipped:
        err.print(f"  skipped {item.source}: {item.reason}", highlight=False, soft_wrap=True)
    what = "rebuilt" if rep.rebuilt else "synced"
    out.print(
        f"{what} in {rep.seconds:.1f} s: {rep.added} added, {rep.changed} changed, {rep.deleted} deleted, "
        f"{rep.unchanged} unchanged, {len(rep.skipped)} skipped; {rep.n_documents} documents, "
        f"{rep.n_chunks} chunks, table version {rep.version}; report in {Path(rep.path) / REPORT_FILE}",
        highlight=False,
    )
    print(rep.path)


def _parse_compression(spec: str) -> Any:
    from eval.settings import CompressionSpec

    name, _, ratio = spec.partition(":")
    try:
        return CompressionSpec(compressor=name, target_ratio=float(ratio) if ratio else 1.0)
    except ValueError as exc:
        raise typer.BadParameter(f"'{spec}': expected NAME or NAME:RATIO, e.g. llmlingua:4 ({exc})") from None


@app.command()
def sweep(
    index_path: Annotated[Path, typer.Option("--index", help="LanceDB folder built by `cribsheet index`.")],
    questions: Annotated[Path, typer.Option(help="JSONL questions: {id, question, answers, ...}.")],
    store: Annotated[Path, typer.Option(help="DuckDB results file (created or appended).")],
    top_k: Annotated[list[int], typer.Option("--top-k", help="Chunks kept after reranking; repeat.")] = [3, 8],  # noqa: B006
    compression: Annotated[list[str], typer.Option("--compression", help="NAME[:RATIO]; repeat.")] = [  # noqa: B006
        "none",
        "llmlingua:4",
        "longllmlingua:4",
    ],
    retrieval: Annotated[list[str], typer.Option(help="hybrid | vector | fts; repeat.")] = ["hybrid"],  # noqa: B006
    reranker: Annotated[
        list[str], typer.Option(help="dense | query-likelihood | none | cross-encoder:PATH; repeat.")
    ] = [  # noqa: B006
        "dense"
    ],
    layout: Annotated[list[str], typer.Option(help="ranked | edges; repeat.")] = ["ranked"],  # noqa: B006
    retrieve_n: Annotated[int, typer.Option(help="Candidates retrieved per question.")] = 20,
    probe_questions: Annotated[int, typer.Option(help="Questions also run alone per setting (latency).")] = 8,
    limit: Annotated[int | None, typer.Option(help="Only the first N questions.")] = None,
    generator_model: Annotated[str | None, typer.Option(help="HF folder or hub id (default: bundled SmolLM2).")] = None,
    compressor_model: Annotated[str | None, typer.Option(help="Compressor LM (default: bundled SmolLM2).")] = None,
    judge_url: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint of a judge model (ragas).")] = None,
    judge_model: Annotated[str | None, typer.Option(help="Judge model name at --judge-url.")] = None,
) -> None:
    """Run the grid of settings over a question set and store one row per question × setting."""
    _environment()
    from eval.judge import JudgeConfig
    from eval.settings import CompressorConfig, GeneratorConfig, GridConfig, SweepConfig
    from eval.store import DuckDBStore
    from flows.pipeline import sweep_flow

    try:
        config = SweepConfig(
            index_path=index_path,
            questions_path=questions,
            store_path=store,
            retrieve_n=retrieve_n,
            limit=limit,
            probe_questions=probe_questions,
            grid=GridConfig.model_validate(
                {
                    "compressions": [_parse_compression(c) for c in compression],
                    "top_ks": top_k,
                    "retrievals": retrieval,
                    "rerankers": reranker,
                    "layouts": layout,
                }
            ),
            generator=GeneratorConfig(model=generator_model),
            compressor=CompressorConfig(model=compressor_model),
            judge=JudgeConfig(base_url=judge_url, model=judge_model or "") if judge_url else None,
        )
        with _progress():
            result = sweep_flow(config)
    except (CribsheetError, ValueError) as exc:
        _fail(exc)
    print_leaderboard(DuckDBStore(store).leaderboard(result.run_id), f"run {result.run_id}")
    print(store)


@app.command()
def warm(
    generator_model: Annotated[str | None, typer.Option(help="HF folder or hub id (default: bundled SmolLM2).")] = None,
) -> None:
    """Load the generator, run the stable prompt prefix cold then warm, and report the cache hit."""
    _environment()
    from eval.assets import smollm2_dir
    from eval.generate import VLLMGenerator
    from eval.prompt import PromptLayout
    from eval.settings import GeneratorConfig

    try:
        config = GeneratorConfig(model=generator_model)
        gen = VLLMGenerator(generator_model or str(smollm2_dir()), config)
        rep = gen.warm(PromptLayout(gen.tokenizer).stable_prefix())
    except CribsheetError as exc:
        _fail(exc)
    out.print(
        f"stable prefix {rep.prefix_tokens} tokens, {rep.cached_tokens} served from cache "
        f"(block size {config.block_size}); TTFT cold {_seconds(rep.cold_ttft_s)}, warm {_seconds(rep.warm_ttft_s)}"
    )


@app.command()
def report(
    store: Annotated[Path, typer.Option(help="DuckDB results file.")],
    run: Annotated[str | None, typer.Option(help="Run id (default: the latest run).")] = None,
) -> None:
    """Print the leaderboard of a run."""
    from eval.store import DuckDBStore

    if not store.is_file():
        _fail(CribsheetError(f"{store}: no results store here"))
    db = DuckDBStore(store)
    run_id = run or db.latest_run()
    if run_id is None:
        _fail(CribsheetError(f"{store}: no runs stored yet"))
        return
    print_leaderboard(db.leaderboard(run_id), f"run {run_id}")


@app.command()
def gate(
    store: Annotated[Path, typer.Option(help="DuckDB results file.")],
    baseline: Annotated[str, typer.Option(help="Baseline setting (name or hash).")],
    candidate: Annotated[str, typer.Option(help="Candidate setting (name or hash).")],
    policy: Annotated[Path, typer.Option(help="Gate policy YAML.")] = Path("policies/gate.yaml"),
    run: Annotated[str | None, typer.Option(help="Run holding both settings (default: latest).")] = None,
    baseline_run: Annotated[str | None, typer.Option(help="Run of the baseline, when runs differ.")] = None,
    candidate_run: Annotated[str | None, typer.Option(help="Run of the candidate, when runs differ.")] = None,
    report_file: Annotated[Path | None, typer.Option("--report", help="Markdown report path.")] = None,
) -> None:
    """May this setting ship? Exit 0 pass, 1 fail, 2 could not decide."""
    _environment()
    from flows.pipeline import gate_flow

    try:
        decision = gate_flow(store, baseline, candidate, policy, run, baseline_run, candidate_run, report_file)
    except CribsheetError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    print_decision(decision)
    raise typer.Exit(decision.exit_code)


def print_decision(d: Any) -> None:
    """The gate decision as a terminal table."""
    from eval.gate import DECISION_COLUMNS, decision_rows

    colour = {"pass": "green", "fail": "red"}.get(d.decision, "yellow")
    table = Table(title=f"gate: {d.candidate} vs {d.baseline} ({d.n_questions} paired questions)")
    for header in DECISION_COLUMNS:
        label = f"{d.policy.confidence:.0%} CI" if header == "CI" else header
        table.add_column(label, justify="left" if header == "metric" else "right")
    for row in decision_rows(d):
        table.add_row(*row)
    out.print(table)
    for reason in d.reasons:
        out.print(f"  {reason}", highlight=False)
    out.print(f"[{colour}]decision: {d.decision.upper()}[/{colour}] (exit {d.exit_code})")


@app.command()
def export(
    store: Annotated[Path, typer.Option(help="DuckDB results file.")],
    parquet: Annotated[Path, typer.Option(help="Folder for one Parquet file per table.")],
) -> None:
    """Write every table of the results store as Parquet."""
    from eval.store import DuckDBStore

    if not store.is_file():
        _fail(CribsheetError(f"{store}: no results store here"))
    for path in DuckDBStore(store).export_parquet(parquet):
        out.print(str(path))
    print(parquet)


@app.command()
def demo(
    workdir: Annotated[Path, typer.Option(help="Where the index and results go.")] = Path("runs/demo"),
    datasets_dir: Annotated[Path, typer.Option("--datasets", help="Where the bundled dataset goes.")] = Path(
        "datasets"
    ),
    limit: Annotated[int | None, typer.Option(help="Only the first N demo questions.")] = None,
) -> None:
    """Bundled dataset -> index the whole corpus -> warm -> sweep the demo grid -> leaderboard."""
    _environment()
    from flows.pipeline import demo_flow

    try:
        with _progress():
            result = demo_flow(workdir, datasets_dir, limit)
    except CribsheetError as exc:
        _fail(exc)
    for stage, seconds in result.stage_seconds.items():
        err.print(f"  {stage:<48} {seconds:8.1f} s")
    if result.warm:
        w = result.warm
        err.print(
            f"  stable prefix {w.prefix_tokens} tokens, {w.cached_tokens} cached; "
            f"TTFT cold {_seconds(w.cold_ttft_s)}, warm {_seconds(w.warm_ttft_s)}"
        )
    print_leaderboard(result.leaderboard, f"demo run {result.run_id}")
    print(Path(result.store_path).resolve())


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
