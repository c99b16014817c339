"""Prefect flows: each only sequences tasks that wrap plain library functions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, task

from corpus.bundled import CORPUS_FILE, DEMO_FILE, build_bundled
from corpus.chunk import ChunkerConfig, SentenceChunker
from corpus.embed import build_embedder
from corpus.index import IndexOptions, IndexReport, sync_index
from corpus.sources import SkipLog, SourceConfig, iter_documents
from eval.gate import GateDecision, GatePolicy, run_gate
from eval.runtime import quiet_offline_env
from eval.settings import SweepConfig
from eval.store import DuckDBStore
from eval.sweep import SweepResult, run_sweep
from flows.progress import report


@task(name="build-bundled-dataset")
def build_dataset_task(out_dir: Path) -> dict[str, Any]:
    """Write the bundled corpus, questions and manifest."""
    return build_bundled(out_dir)


@task(name="index-corpus")
def index_task(
    source: SourceConfig, index_path: Path, embedder: str, chunker: ChunkerConfig, options: IndexOptions
) -> IndexReport:
    """Stream, chunk, embed and sync the LanceDB index (only new or changed documents are embedded)."""
    quiet_offline_env()  # a scheduled run through a worker never went through the CLI
    emb = build_embedder(embedder)
    skips = SkipLog()
    return sync_index(
        iter_documents(source, skips),
        SentenceChunker(chunker, emb.count_tokens),
        emb,
        index_path,
        options,
        progress=lambda done, total: report("index (documents)", done, total),
        skipped=skips.items,
    )


@task(name="sweep")
def sweep_task(config: SweepConfig) -> SweepResult:
    """Run the grid over the question set and store the rows."""
    quiet_offline_env()
    return run_sweep(config, progress=report)


@flow(name="cribsheet-index", log_prints=True)
def index_flow(
    corpus_path: Path,
    index_path: Path,
    embedder: str = "minilm-l6-v2",
    chunker: ChunkerConfig | None = None,
    options: IndexOptions | None = None,
    source: SourceConfig | None = None,
) -> IndexReport:
    """Index a corpus (folder, JSONL or Parquet) into LanceDB; `source` overrides field names and limits."""
    src = source or SourceConfig(path=corpus_path)
    return index_task(src, index_path, embedder, chunker or ChunkerConfig(), options or IndexOptions())


@flow(name="cribsheet-sweep", log_prints=True)
def sweep_flow(config: SweepConfig) -> SweepResult:
    """Sweep the grid of settings and store results in DuckDB."""
    return sweep_task(config)


@task(name="gate")
def gate_task(
    store_path: Path,
    baseline: str,
    candidate: str,
    policy_path: Path,
    run: str | None,
    baseline_run: str | None,
    candidate_run: str | None,
    report_path: Path | None,
) -> GateDecision:
    """Decide whether the candidate may ship; the decision row is written to the store."""
    return run_gate(
        DuckDBStore(store_path),
        baseline,
        candidate,
        GatePolicy.load(policy_path),
        run=run,
        baseline_run=baseline_run,
        candidate_run=candidate_run,
        report_path=report_path,
    )


@flow(name="cribsheet-gate", log_prints=True)
def gate_flow(
    store_path: Path,
    baseline: str,
    candidate: str,
    policy_path: Path = Path("policies/gate.yaml"),
    run: str | None = None,
    baseline_run: str | None = None,
    candidate_run: str | None = None,
    report_path: Path | None = None,
) -> GateDecision:
    """The release gate for one candidate setting against a baseline."""
    return gate_task(store_path, baseline, candidate, policy_path, run, baseline_run, candidate_run, report_path)


@flow(name="cribsheet-demo", log_prints=True)
def demo_flow(workdir: Path, datasets_dir: Path, limit: int | None = None) -> SweepResult:
    """Bundled dataset -> whole-corpus index -> demo sweep."""
    build_dataset_task(datasets_dir)
    index_path = workdir / "index.lancedb"
    index_task(
        SourceConfig(path=datasets_dir / CORPUS_FILE), index_path, "minilm-l6-v2", ChunkerConfig(), IndexOptions()
    )
    config = SweepConfig(
        index_path=index_path,
        questions_path=datasets_dir / DEMO_FILE,
        store_path=workdir / "results.duckdb",
        limit=limit,
    )
    return sweep_task(config)
