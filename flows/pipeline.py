"""Prefect flows: each only sequences tasks that wrap plain library functions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, task

from corpus.bundled import CORPUS_FILE, DEMO_FILE, build_bundled
from corpus.chunk import ChunkerConfig, SentenceChunker
from corpus.embed import build_embedder
from corpus.index import IndexReport, build_index
from corpus.load import load_documents
from eval.settings import SweepConfig
from eval.sweep import SweepResult, run_sweep
from flows.progress import report


@task(name="build-bundled-dataset")
def build_dataset_task(out_dir: Path) -> dict[str, Any]:
    """Write the bundled corpus, questions and manifest."""
    return build_bundled(out_dir)


@task(name="index-corpus")
def index_task(
    corpus_path: Path, index_path: Path, embedder: str, chunker: ChunkerConfig, rebuild: bool = False
) -> IndexReport:
    """Load, chunk, embed and write the LanceDB index (kept when corpus and spec are unchanged)."""
    docs = load_documents(corpus_path)
    return build_index(
        docs,
        SentenceChunker(chunker),
        build_embedder(embedder),
        index_path,
        progress=lambda done, total: report("index", done, total),
        rebuild=rebuild,
    )


@task(name="sweep")
def sweep_task(config: SweepConfig) -> SweepResult:
    """Run the grid over the question set and store the rows."""
    return run_sweep(config, progress=report)


@flow(name="cribsheet-index", log_prints=True)
def index_flow(
    corpus_path: Path,
    index_path: Path,
    embedder: str = "minilm-l6-v2",
    chunker: ChunkerConfig | None = None,
    rebuild: bool = False,
) -> IndexReport:
    """Index a JSONL corpus into LanceDB."""
    return index_task(corpus_path, index_path, embedder, chunker or ChunkerConfig(), rebuild)


@flow(name="cribsheet-sweep", log_prints=True)
def sweep_flow(config: SweepConfig) -> SweepResult:
    """Sweep the grid of settings and store results in DuckDB."""
    return sweep_task(config)


@flow(name="cribsheet-demo", log_prints=True)
def demo_flow(workdir: Path, datasets_dir: Path, limit: int | None = None) -> SweepResult:
    """Bundled dataset -> whole-corpus index -> demo sweep."""
    build_dataset_task(datasets_dir)
    index_path = workdir / "index.lancedb"
    index_task(datasets_dir / CORPUS_FILE, index_path, "minilm-l6-v2", ChunkerConfig())
    config = SweepConfig(
        index_path=index_path,
        questions_path=datasets_dir / DEMO_FILE,
        store_path=workdir / "results.duckdb",
        limit=limit,
    )
    return sweep_task(config)
